"""The interface every prefix cache implements.

A prefix cache remembers which KV-pool slots hold the K/V of which token-id prefix, so a new
request that starts with a cached prefix reuses those slots instead of recomputing them. All
bookkeeping is in whole pages: a key is truncated down to a multiple of `page_size` tokens, and
only page-aligned prefixes are ever matched, because the pool hands out and takes back pages.

Ownership rules, which the scheduler relies on to never leak or double-free a page:
- `insert` takes ownership of the slots of the *new* part of a key only; for the part that was
  already cached the caller keeps its own copies and must free them (they are duplicates).
- `evict` and `reset` hand owned slots back; the caller returns them to the free list.
- A locked handle protects its whole path to the root from `evict`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class MatchResult:
    handle: object  # opaque: pass it to lock/unlock; None for caches that keep nothing
    slots: torch.Tensor  # int64 [length]: slots of the matched prefix, a page multiple long

    @property
    def length(self) -> int:
        return int(self.slots.numel())


@dataclass(frozen=True)
class InsertResult:
    had: int  # tokens of the key that were cached before the call (a page multiple)
    owned: int  # tokens of the key the cache holds after the call (0 for a cache that keeps none)


class BasePrefixCache(ABC):
    page_size: int

    def align_down(self, num_tokens: int) -> int:
        """The largest page multiple <= num_tokens: only whole pages are cached."""
        return num_tokens // self.page_size * self.page_size

    @abstractmethod
    def match_prefix(self, ids: Sequence[int]) -> MatchResult:
        """The longest cached page-aligned prefix of ids; counts as a use for LRU eviction."""

    @abstractmethod
    def lock(self, handle: object) -> None:
        """Protect the matched path from eviction until the matching `unlock`."""

    @abstractmethod
    def unlock(self, handle: object) -> None:
        """Undo one `lock` of the same handle."""

    @abstractmethod
    def insert(self, ids: Sequence[int], slots: torch.Tensor) -> InsertResult:
        """Cache ids[:n] -> slots[:n], n = len(ids) rounded down to a page multiple.

        len(ids) == len(slots). The cache takes the slots of positions [had, owned), the part it
        did not have yet. Slots the caller allocated itself inside [0, had) are duplicates of
        cached ones and the caller frees them; so are slots past `owned` (the unaligned tail).
        """

    @abstractmethod
    def evict(self, num_tokens: int) -> torch.Tensor:
        """Free at least num_tokens tokens of unlocked entries, least recently used first.

        Returns the freed slots (int64, whole pages); fewer than asked if not enough is evictable.
        """

    @property
    @abstractmethod
    def evictable_size(self) -> int:
        """Cached tokens that no lock protects."""

    @property
    @abstractmethod
    def protected_size(self) -> int:
        """Cached tokens on locked paths."""

    @abstractmethod
    def check_integrity(self) -> None:
        """Raise AssertionError naming the first broken invariant, if any."""

    @abstractmethod
    def reset(self) -> torch.Tensor:
        """Drop every entry and return all owned slots; RuntimeError if anything is locked."""
