"""Kernel ops used by the engine. Each op dispatches to the fastest implementation available:
the custom CUDA kernels of chapter 19 for GPU tensors when the extension builds, otherwise the
torch reference in torch_ops.py (always on a CPU)."""

from __future__ import annotations

import torch

from . import torch_ops

from .cuda_ext import extension_for

from functools import cache
from types import ModuleType

from minisgl.env import load_env

from minisgl.trace.runtime import traced



@traced("store_kv")
def store_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, indices: torch.Tensor,
                k: torch.Tensor, v: torch.Tensor) -> None:
    """Write the new tokens' K and V rows into the KV pool at slots `indices`."""
    if (ext := extension_for(k)) is not None:
        n = k.shape[0]
        ext.store_kv(k_cache.view(k_cache.shape[0], -1), v_cache.view(v_cache.shape[0], -1),
                     indices.int(), k.reshape(n, -1), v.reshape(n, -1),
                     torch.cuda.current_stream().cuda_stream)
        return
    torch_ops.store_cache(k_cache, v_cache, indices, k, v)


@traced("embedding")
def indexing(weight: torch.Tensor, ids: torch.Tensor, start: int = 0,
             length: int | None = None) -> torch.Tensor:
    """Embedding lookup of a (possibly vocabulary-sharded) table; see torch_ops.indexing."""
    if (ext := extension_for(weight)) is not None:
        rows = weight.shape[0] if length is None else length
        return ext.indexing(weight, ids.int().flatten(), start, rows,
                            torch.cuda.current_stream().cuda_stream).view(*ids.shape, -1)
    return torch_ops.indexing(weight, ids, start, length)




@cache
def _fused_kernels() -> ModuleType | None:
    if load_env().disable_fused_kernels:
        return None
    from . import triton  # imported on first use: importing Triton takes about half a second

    return triton


def triton_for(t: torch.Tensor) -> ModuleType | None:
    """The fused Triton kernels of chapter 20 (minisgl.kernel.triton) if t lives on a GPU, else
    None: on a CPU the layers' torch code runs, and it is the reference the kernels must match.
    MINISGL_DISABLE_FUSED_KERNELS=1 keeps the torch code on a GPU too (read once)."""
    return _fused_kernels() if t.is_cuda else None


__all__ = ["indexing", "store_cache"]
