"""Solutions: the implementations of each op the benchmark times and `apply` may pick (ch. 22).

A solution is a function with its op's canonical signature (ops.py). The registry holds, per op,
the torch code (the default on a CPU), the Triton kernels of chapters 18 and 20 (interpreted on
a CPU) and the CUDA kernels of chapter 19 where the extension builds. A test or a learner adds
more with `register`, for example a deliberately wrong one to show that it is never applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl.kernel import torch_ops
from minisgl.layers.rotary import rotate
from minisgl.moe.routing import route
from minisgl.moe.torch_ref import experts_torch


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
    is applied: the torch code on a CPU; on a GPU the Triton kernels (unless
    MINISGL_DISABLE_FUSED_KERNELS) and the CUDA extension where it builds. None for attention,
    which the engine chooses once (--attn), not per call."""
    if op == "attention":
        return None
    if device.type != "cuda" or op == "sampling":
        return "torch"
    if op in ("store_kv", "embedding"):
        from minisgl.kernel.cuda_ext import load_extension

        return "cuda" if load_extension() is not None else "torch"
    if op == "moe":
        return "triton"  # moe.resolve_backend's auto on a GPU
    from minisgl.env import load_env  # what kernel.triton_for reads

    return "torch" if load_env().disable_fused_kernels else "triton"


def _triton():
    from minisgl.kernel import triton as kernels  # interpreted on a CPU

    return kernels


# --- torch ------------------------------------------------------------------------------------
def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def fused_add_rms_norm_torch(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                             eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    total = x + residual
    return rms_norm_torch(total, weight, eps), total


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


def rope_torch(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               num_qo_heads: int, num_kv_heads: int, head_dim: int,
               q_weight: torch.Tensor | None, k_weight: torch.Tensor | None, eps: float
               ) -> tuple[torch.Tensor, torch.Tensor]:
    q_size, kv_size = num_qo_heads * head_dim, num_kv_heads * head_dim
    q = qkv[:, :q_size].reshape(-1, num_qo_heads, head_dim)
    k = qkv[:, q_size:q_size + kv_size].reshape(-1, num_kv_heads, head_dim)
    if q_weight is not None:
        q, k = rms_norm_torch(q, q_weight, eps), rms_norm_torch(k, k_weight, eps)
    c, s = cos[positions].to(qkv.dtype), sin[positions].to(qkv.dtype)
    return rotate(q, c, s), rotate(k, c, s)


def moe_torch(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              top_k: int, normalize: bool) -> torch.Tensor:
    weights, ids = route(router_logits, top_k, normalize)
    return experts_torch(x, w13, w2, weights, ids)


def sampling_torch(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                   u: torch.Tensor) -> torch.Tensor:
    from minisgl.engine.device_sample import sample_top_k_top_p

    return sample_top_k_top_p.__wrapped__(logits, top_k, top_p, u)  # the undecorated function


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


# --- Triton (chapters 18 and 20) ----------------------------------------------------------------
def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _triton().rms_norm(x, weight, eps)


def fused_add_rms_norm_triton(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                              eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return _triton().fused_add_rms_norm(x, residual, weight, eps)


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    return _triton().silu_and_mul(x)


def rope_triton(*args) -> tuple[torch.Tensor, torch.Tensor]:
    return _triton().qk_norm_rope(*args)


def moe_triton(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor,
               w2: torch.Tensor, top_k: int, normalize: bool) -> torch.Tensor:
    from minisgl.kernel.triton.fused_moe import experts_triton, route_triton

    weights, ids = route_triton(router_logits, top_k, normalize)
    return experts_triton(x, w13, w2, weights, ids)


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
    table, rows, lens = _page_table(kv_indptr, kv_indices)
    k, v = k_cache[:, 0], v_cache[:, 0]
    if qo_indptr is None:
        return kernels.decode_attention(q, k, v, table, rows, lens, sm_scale=sm_scale)
    max_q = int((qo_indptr[1:] - qo_indptr[:-1]).max())
    return kernels.extend_attention(q, k, v, table, rows, qo_indptr.int(), lens, max_q,
                                    sm_scale=sm_scale)


# --- CUDA (chapter 19) ---------------------------------------------------------------------------
def store_kv_cuda(k_cache, v_cache, indices, k, v) -> None:
    from minisgl.kernel.cuda_ext import extension_for

    ext = extension_for(k)
    if ext is None:
        raise RuntimeError("the chapter-19 CUDA extension is not available here")
    n = k.shape[0]
    ext.store_kv(k_cache.view(k_cache.shape[0], -1), v_cache.view(v_cache.shape[0], -1),
                 indices.int(), k.reshape(n, -1), v.reshape(n, -1),
                 torch.cuda.current_stream().cuda_stream)


def embedding_cuda(weight, ids, start, length) -> torch.Tensor:
    from minisgl.kernel.cuda_ext import extension_for

    ext = extension_for(weight)
    if ext is None:
        raise RuntimeError("the chapter-19 CUDA extension is not available here")
    return ext.indexing(weight, ids.int().flatten(), start, length,
                        torch.cuda.current_stream().cuda_stream)


def embedding_torch(weight, ids, start, length) -> torch.Tensor:
    return torch_ops.indexing(weight, ids, start, length)


for _impl in [
    Impl("rmsnorm", "torch", "python", rms_norm_torch, "layers/norm.py's torch code"),
    Impl("rmsnorm", "triton", "triton", rms_norm_triton, "kernel/triton/rmsnorm.py (ch. 20)"),
    Impl("fused_add_rmsnorm", "torch", "python", fused_add_rms_norm_torch, "add, then RMSNorm"),
    Impl("fused_add_rmsnorm", "triton", "triton", fused_add_rms_norm_triton,
         "one kernel: add and norm (ch. 20)"),
    Impl("silu_and_mul", "torch", "python", silu_and_mul_torch, "F.silu(gate) * up"),
    Impl("silu_and_mul", "triton", "triton", silu_and_mul_triton, "one kernel (ch. 20)"),
    Impl("rope", "torch", "python", rope_torch, "split, q/k RMSNorm, rotate (layers/rotary.py)"),
    Impl("rope", "triton", "triton", rope_triton, "kernel/triton/qk_norm_rope.py (ch. 20)"),
    Impl("store_kv", "torch", "python", torch_ops.store_cache, "index_copy_ (torch_ops.py)"),
    Impl("store_kv", "cuda", "cuda", store_kv_cuda, "kv_kernels.cuh (ch. 19)", needs_cuda=True),
    Impl("embedding", "torch", "python", embedding_torch, "torch_ops.indexing"),
    Impl("embedding", "cuda", "cuda", embedding_cuda, "kv_kernels.cuh (ch. 19)",
         needs_cuda=True),
    Impl("moe", "torch", "python", moe_torch, "a loop over the experts (moe/torch_ref.py)"),
    Impl("moe", "triton", "triton", moe_triton, "sort by expert + grouped GEMM (ch. 18)"),
    Impl("sampling", "torch", "python", sampling_torch, "sort, cut, inverse CDF"),
    Impl("attention", "torch", "python", attention_torch, "per-request SDPA (torch backend)"),
    Impl("attention", "triton", "triton", attention_triton, "paged decode/extend kernels "
         "(ch. 20)"),
]:
    register(_impl)

ATTENTION_BACKEND = {"torch": "torch", "triton": "triton"}  # attention solution -> --attn name
