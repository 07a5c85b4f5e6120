"""A prefix cache that caches nothing: every request computes its whole prompt.

It keeps the scheduler's code path identical with and without prefix sharing (chapter 8), and is
the baseline the radix cache of chapter 10 is measured against.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .base import BasePrefixCache, InsertResult, MatchResult


class NaiveCache(BasePrefixCache):
    def __init__(self, page_size: int, device: torch.device | str = "cpu") -> None:
        if page_size <= 0:
            raise ValueError(f"page_size must be > 0, got {page_size}")
        self.page_size = page_size
        self.device = torch.device(device)

    def _empty(self) -> torch.Tensor:
        return torch.empty(0, dtype=torch.int64, device=self.device)

    def match_prefix(self, ids: Sequence[int]) -> MatchResult:
        return MatchResult(handle=None, slots=self._empty())

    def lock(self, handle: object) -> None:
        pass  # nothing is cached, so nothing needs protecting

    def unlock(self, handle: object) -> None:
        pass

    def insert(self, ids: Sequence[int], slots: torch.Tensor) -> InsertResult:
        if len(ids) != len(slots):
            raise ValueError(f"insert: {len(ids)} ids but {len(slots)} slots")
        return InsertResult(had=0, owned=0)  # owned=0: the caller frees every slot

    def evict(self, num_tokens: int) -> torch.Tensor:
        return self._empty()

    @property
    def evictable_size(self) -> int:
        return 0

    @property
    def protected_size(self) -> int:
        return 0

    def check_integrity(self) -> None:
        pass

    def reset(self) -> torch.Tensor:
        return self._empty()
