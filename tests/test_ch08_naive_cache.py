"""Chapter 8: the naive prefix cache keeps nothing, so the caller frees every slot it inserts."""

from __future__ import annotations

import pytest
import torch

from minisgl.kvcache import (
    BasePrefixCache,
    InsertResult,
    MatchResult,
    NaiveCache,
    create_prefix_cache,
)


def test_match_is_always_empty():
    cache = NaiveCache(page_size=4)
    cache.insert(list(range(8)), torch.arange(8))
    result = cache.match_prefix(list(range(8)))
    assert isinstance(result, MatchResult)
    assert result.length == 0 and result.slots.dtype == torch.int64 and result.slots.numel() == 0
    assert result.handle is None


def test_insert_owns_nothing():
    cache = NaiveCache(page_size=2)
    assert cache.insert([1, 2, 3], torch.arange(3)) == InsertResult(had=0, owned=0)
    with pytest.raises(ValueError):
        cache.insert([1, 2], torch.arange(3))


def test_lock_evict_reset_are_no_ops():
    cache = NaiveCache(page_size=1)
    handle = cache.match_prefix([1, 2]).handle
    cache.lock(handle)
    assert cache.protected_size == 0 and cache.evictable_size == 0
    cache.unlock(handle)
    assert cache.evict(10).numel() == 0 and cache.evict(10).dtype == torch.int64
    assert cache.reset().numel() == 0
    cache.check_integrity()


def test_factory_and_interface():
    cache = create_prefix_cache("naive", 16)
    assert isinstance(cache, NaiveCache) and isinstance(cache, BasePrefixCache)
    assert cache.page_size == 16 and cache.align_down(37) == 32
    with pytest.raises(ValueError, match="naive"):
        create_prefix_cache("unknown", 16)
    with pytest.raises(ValueError):
        NaiveCache(page_size=0)
