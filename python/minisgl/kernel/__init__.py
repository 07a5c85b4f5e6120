"""Kernel ops used by the engine. Each op dispatches to the fastest implementation available;
until chapter 19 that is always the torch reference in torch_ops.py."""

from __future__ import annotations

import torch

from . import torch_ops


def store_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, indices: torch.Tensor,
                k: torch.Tensor, v: torch.Tensor) -> None:
    """Write the new tokens' K and V rows into the KV pool at slots `indices`."""
    torch_ops.store_cache(k_cache, v_cache, indices, k, v)


def indexing(weight: torch.Tensor, ids: torch.Tensor, start: int = 0,
             length: int | None = None) -> torch.Tensor:
    """Embedding lookup of a (possibly vocabulary-sharded) table; see torch_ops.indexing."""
    return torch_ops.indexing(weight, ids, start, length)


__all__ = ["indexing", "store_cache"]
