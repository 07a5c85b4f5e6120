"""KV-cache memory: the paged pool of K/V tensors and the prefix caches that share its pages."""

from __future__ import annotations

import torch

from .base import BasePrefixCache, InsertResult, MatchResult
from .mha_pool import KVPoolConfig, MHAKVCache
from .naive_cache import NaiveCache

PREFIX_CACHE_KINDS = ("naive",)


def create_prefix_cache(kind: str, page_size: int, *,
                        device: torch.device | str = "cpu") -> BasePrefixCache:
    """The prefix cache named by `kind` ("radix" shares prefixes, "naive" never does)."""
    if kind == "naive":
        return NaiveCache(page_size, device=device)
    raise ValueError(f"unknown prefix cache {kind!r}; choose one of {', '.join(PREFIX_CACHE_KINDS)}")


__all__ = [
    "BasePrefixCache",
    "InsertResult",
    "KVPoolConfig",
    "MHAKVCache",
    "MatchResult",
    "NaiveCache",
    "PREFIX_CACHE_KINDS",
    "create_prefix_cache",
]
