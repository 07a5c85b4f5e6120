"""Solutions: the implementations of each op the benchmark times and `apply` may pick (ch. 22).

A solution is a function with its op's canonical signature (ops.py). For every traced op they are
the op's implementations in the registry (minisgl.ops), which already take those arguments: the
torch reference (what a CPU runs), the Triton kernels of chapters 18 and 20 (interpreted on a
CPU) and the CUDA kernels of chapter 19 where the extension builds. Attention, whose
implementations are whole backends chosen once per engine, gets one function per backend here,
with the Definition's paged signature. A test or a learner adds more with `register`, for
example a deliberately wrong one to show that it is never applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl import ops

from .flashinfer_solutions import flashinfer_ops
from .ops import OPS
from .prepared import MetadataCache


@dataclass(frozen=True)
class Impl:
    op: str  # the op it implements (ops.OPS key)
    suffix: str  # the Solution is named <definition>_<suffix>
    language: str  # FlashInfer Trace's language: python (torch), triton, cuda
    fn: Callable
    description: str
    needs_cuda: bool = False  # only on a GPU (the CUDA extension)

    def available(self, device: torch.device) -> bool:
        return device.type == "cuda" or not self.needs_cuda


SOLUTIONS: dict[str, list[Impl]] = {}


def register(impl: Impl) -> Impl:
    """Add a solution (a later one with the same op and suffix replaces the earlier)."""
    impls = [i for i in SOLUTIONS.setdefault(impl.op, []) if i.suffix != impl.suffix]
    SOLUTIONS[impl.op] = [*impls, impl]
    return impl


def unregister(op: str, suffix: str) -> None:
    SOLUTIONS[op] = [i for i in SOLUTIONS.get(op, []) if i.suffix != suffix]


def find(op: str, suffix: str) -> Impl | None:
    return next((i for i in SOLUTIONS.get(op, []) if i.suffix == suffix), None)


def engine_default(op: str, device: torch.device) -> str | None:
    """The suffix of the solution that is what the engine runs for `op` on `device` when nothing
    is applied: what the registry's rule picks for a tensor there (the torch code on a CPU; on a
    GPU the Triton kernels unless MINISGL_DISABLE_FUSED_KERNELS, the CUDA extension where it
    builds). None for attention, which the engine chooses once (--attn), not per call."""
    if op == "attention":
        return None
    return ops.ALL[op].kind_for(torch.empty(0, device=device))


def from_registry(op: ops.Op) -> list[Impl]:
    """The registry's implementations of an op as solutions, named after what they are."""
    def where(fn: Callable) -> str:
        return f"{fn.__module__}.{fn.__qualname__}"

    found = [Impl(op.name, "torch", "python", op.reference, f"{where(op.reference)} (reference)")]
    for impl in op.faster:  # the language is what they are written in: triton, cuda
        found.append(Impl(op.name, impl.kind, impl.kind, impl.fn, where(impl.fn),
                          needs_cuda=impl.kind == "cuda"))
    return found


def attention_torch(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                    qo_indptr: torch.Tensor | None = None) -> torch.Tensor:
    """Per request: gather its K/V rows, SDPA over them (causal offset for new tokens)."""
    heads, kv_heads = q.shape[1], k_cache.shape[2]
    group = heads // kv_heads
    out = torch.empty_like(q)
    qo = qo_indptr.tolist() if qo_indptr is not None else list(range(q.shape[0] + 1))
    kv = kv_indptr.tolist()
    for b in range(len(kv) - 1):
        pages = kv_indices[kv[b]:kv[b + 1]].long()
        k = k_cache[pages, 0].transpose(0, 1)  # [kv_heads, L, D]
        v = v_cache[pages, 0].transpose(0, 1)
        n, length = qo[b + 1] - qo[b], pages.shape[0]
        qb = q[qo[b]:qo[b + 1]].view(n, kv_heads, group, -1).permute(1, 2, 0, 3)
        visible = (torch.arange(length, device=q.device)[None, :]
                   <= (length - n + torch.arange(n, device=q.device))[:, None])
        o = F.scaled_dot_product_attention(qb.flatten(1, 2), k, v,
                                           attn_mask=visible.repeat(group, 1), scale=sm_scale)
        out[qo[b]:qo[b + 1]] = o.view(kv_heads, group, n, -1).permute(2, 0, 1, 3).flatten(1, 2)
    return out


_tables = MetadataCache()


def _triton():
    from minisgl.kernel import triton as kernels  # interpreted on a CPU

    return kernels


def _page_table(kv_indptr: torch.Tensor, kv_indices: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashInfer's indptr/indices as the engine's page table: one row per request."""
    lens = (kv_indptr[1:] - kv_indptr[:-1]).int()
    batch, longest = lens.shape[0], max(int(lens.max()), 1) if lens.numel() else 1
    table = torch.zeros(batch, longest, dtype=torch.int32, device=kv_indices.device)
    for b, (start, n) in enumerate(zip(kv_indptr[:-1].tolist(), lens.tolist())):
        table[b, :n] = kv_indices[start:start + n]
    rows = torch.arange(batch, dtype=torch.int32, device=kv_indices.device)
    return table, rows, lens


def attention_triton(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
                     qo_indptr: torch.Tensor | None = None) -> torch.Tensor:
    kernels = _triton()

    def prepare() -> tuple:
        table, rows, lens = _page_table(kv_indptr, kv_indices)
        if qo_indptr is None:
            return table, rows, lens, None, 1
        return (table, rows, lens, qo_indptr.int(),
                int((qo_indptr[1:] - qo_indptr[:-1]).max()))

    table, rows, lens, cu_q, max_q = _tables.get((kv_indptr, kv_indices, qo_indptr), prepare)
    k, v = k_cache[:, 0], v_cache[:, 0]
    if cu_q is None:
        return kernels.decode_attention(q, k, v, table, rows, lens, sm_scale=sm_scale)
    return kernels.extend_attention(q, k, v, table, rows, cu_q, lens, max_q, sm_scale=sm_scale)


for _name in OPS:
    if _name != "attention":
        for _impl in from_registry(ops.ALL[_name]):
            register(_impl)
register(Impl("attention", "torch", "python", attention_torch, "per-request SDPA (torch backend)"))
register(Impl("attention", "triton", "triton", attention_triton, "paged decode/extend kernels "
              "(ch. 20)"))

ATTENTION_BACKEND = {"torch": "torch", "triton": "triton"}  # attention solution -> --attn name
# >>> ch23
for _op, _fn, _what in flashinfer_ops():  # FlashInfer's kernels, where it is installed
    register(Impl(_op, "flashinfer", "cuda", _fn, _what, needs_cuda=True))
ATTENTION_BACKEND["flashinfer"] = "flashinfer"
# <<< ch23
