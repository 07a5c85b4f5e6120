"""Kernel ops used by the engine. Each op dispatches to the fastest implementation available:
the custom CUDA kernels of chapter 19 for GPU tensors when the extension builds, otherwise the
torch reference in torch_ops.py (always on a CPU)."""

from __future__ import annotations

import torch

from . import torch_ops

from .cuda_ext import extension_for



def store_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, indices: torch.Tensor,
                k: torch.Tensor, v: torch.Tensor) -> None:
    """Write the new tokens' K and V rows into the KV pool at slots `indices`."""
    # >>> ch19
    if (ext := extension_for(k)) is not None:
        n = k.shape[0]
        ext.store_kv(k_cache.view(k_cache.shape[0], -1), v_cache.view(v_cache.shape[0], -1),
                     indices.int(), k.reshape(n, -1), v.reshape(n, -1),
                     torch.cuda.current_stream().cuda_stream)
        return
    # <<< ch19
    torch_ops.store_cache(k_cache, v_cache, indices, k, v)


def indexing(weight: torch.Tensor, ids: torch.Tensor, start: int = 0,
             length: int | None = None) -> torch.Tensor:
    """Embedding lookup of a (possibly vocabulary-sharded) table; see torch_ops.indexing."""
    # >>> ch19
    if (ext := extension_for(weight)) is not None:
        rows = weight.shape[0] if length is None else length
        return ext.indexing(weight, ids.int().flatten(), start, rows,
                            torch.cuda.current_stream().cuda_stream).view(*ids.shape, -1)
    # <<< ch19
    return torch_ops.indexing(weight, ids, start, length)


__all__ = ["indexing", "store_cache"]
