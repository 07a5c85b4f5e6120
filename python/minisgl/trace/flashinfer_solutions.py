"""FlashInfer's kernels as solutions (chapter 23): a real third-party library in the trace loop.

Where `import flashinfer` works, its paged attention (decode and causal prefill), RMSNorm, fused
add + RMSNorm and SiLU-and-mul join the solutions of the Definitions they implement. The benchmark
grades and times them beside the torch, Triton and CUDA solutions on the captured workloads, and
`apply` picks them where they are faster by MIN_GAIN, like any other: attention through the
engine's `flashinfer` backend (attention/flashinfer.py), the other ops per call. RoPE is not among
them: FlashInfer rotates separate q and k tensors with its own cos/sin cache layout, and our op
takes the fused qkv tensor of the layer.

Each solution keeps the op's contract, which is not always FlashInfer's: fused_add_rmsnorm here
returns new tensors, where FlashInfer's overwrites its inputs, so the inputs are copied first
(that copy is part of what the benchmark times).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.util import find_spec
from typing import Any

import torch

from .prepared import MetadataCache

DESCRIPTION = "FlashInfer {version}: flashinfer.{name}"


def installed() -> bool:
    return find_spec("flashinfer") is not None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    import flashinfer

    # FlashInfer takes [rows, hidden] or [rows, heads, head_dim], contiguous
    rows = x.reshape(-1, x.shape[-1]) if x.dim() != 3 else x
    return flashinfer.norm.rmsnorm(rows.contiguous(), weight, eps).view(x.shape)


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    import flashinfer

    if residual is None:  # the first layer: x itself is the residual
        return rms_norm(x, weight, eps), x
    out, summed = x.reshape(-1, x.shape[-1]).clone(), residual.reshape(-1, x.shape[-1]).clone()
    flashinfer.norm.fused_add_rmsnorm(out, summed, weight, eps)  # summed += out; out = norm
    return out.view(x.shape), summed.view(x.shape)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    import flashinfer

    return flashinfer.activation.silu_and_mul(x.contiguous())


_planned = MetadataCache()  # plan() is per batch in the engine: the benchmark times run() alone

_workspace: dict[torch.device, torch.Tensor] = {}


def attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
              kv_indptr: torch.Tensor, kv_indices: torch.Tensor, sm_scale: float,
              qo_indptr: torch.Tensor | None = None) -> torch.Tensor:
    """The Definition's paged signature (pages of one token, NHD) on FlashInfer's wrappers."""
    wrapper = _planned.get((q, k_cache, kv_indptr, kv_indices, qo_indptr),
                           lambda: plan(q, k_cache, kv_indptr, kv_indices, sm_scale, qo_indptr))
    return wrapper.run(q, (k_cache, v_cache))


def plan(q: torch.Tensor, k_cache: torch.Tensor, kv_indptr: torch.Tensor,
         kv_indices: torch.Tensor, sm_scale: float, qo_indptr: torch.Tensor | None) -> Any:
    import flashinfer

    from minisgl.attention.flashinfer import WORKSPACE_BYTES, decode_wrapper, prefill_wrapper

    device = q.device
    if device not in _workspace:
        _workspace[device] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    heads, kv_heads, head_dim = q.shape[1], k_cache.shape[2], q.shape[2]
    indptr = kv_indptr.to("cpu", torch.int32)
    batch = indptr.numel() - 1
    last_page_len = torch.ones(batch, dtype=torch.int32)
    indices = kv_indices.to(device, torch.int32)
    common = {"num_qo_heads": heads, "num_kv_heads": kv_heads, "page_size": 1,
              "sm_scale": sm_scale, "q_data_type": q.dtype, "kv_data_type": k_cache.dtype}
    if qo_indptr is None:
        wrapper = decode_wrapper(flashinfer, _workspace[device], heads, kv_heads)
        wrapper.plan(indptr, indices, last_page_len, head_dim=head_dim, **common)
    else:
        wrapper = prefill_wrapper(flashinfer, _workspace[device])
        wrapper.plan(qo_indptr.to("cpu", torch.int32), indptr, indices, last_page_len,
                     head_dim_qk=head_dim, causal=True, **common)
    return wrapper


def flashinfer_ops() -> list[tuple[str, Callable, str]]:
    """(op, solution, description) for each kernel; none where FlashInfer is not installed
    (every CPU CI machine). solutions.py registers them."""
    if not installed():
        return []
    from importlib.metadata import PackageNotFoundError, version

    try:
        release = version("flashinfer-python")
    except PackageNotFoundError:  # unpacked onto PYTHONPATH rather than installed
        import flashinfer

        release = getattr(flashinfer, "__version__", "?")
    made = [("rmsnorm", rms_norm, "norm.rmsnorm"),
            ("fused_add_rmsnorm", fused_add_rms_norm, "norm.fused_add_rmsnorm (on copies)"),
            ("silu_and_mul", silu_and_mul, "activation.silu_and_mul"),
            ("attention", attention, "BatchDecode/BatchPrefillWithPagedKVCacheWrapper (fa2, "
             "pages of one token)")]
    return [(op, fn, DESCRIPTION.format(version=release, name=name)) for op, fn, name in made]
