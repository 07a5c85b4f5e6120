"""Who owns which KV page: the free list, the prefix cache, and each running request.

A request's page-table row maps its positions to pool slots. Positions [0, shared_len) point at
slots the prefix cache owns (matched when the request was admitted, locked while it runs); the
rest, up to alloc_len, lie in pages the request allocated itself. When a request finishes, the
prefix cache may take over its pages (radix), and whatever nobody owns goes back to the free list.
Every page is always in exactly one of those places; `check_integrity` verifies it.
"""

from __future__ import annotations

import torch

from minisgl.core import Req
from minisgl.kvcache import BasePrefixCache
from minisgl.utils import cdiv
from minisgl.utils.transfer import copy_to_device


class CacheManager:
    def __init__(self, num_pages: int, page_size: int, page_table: torch.Tensor,
                 prefix_cache: BasePrefixCache) -> None:
        self.num_pages = num_pages
        self.page_size = page_size
        self.page_table = page_table
        # The scheduler reads a copy of the page table kept on the host: reading the device table
        # would make the CPU wait for the step in flight (chapter 16). Writes go to both.
        self.host_table = page_table if page_table.device.type == "cpu" else \
            torch.zeros_like(page_table, device="cpu")
        self.prefix_cache = prefix_cache
        self._free_pages = list(range(num_pages - 1, -1, -1))

    @property
    def free_tokens(self) -> int:
        return len(self._free_pages) * self.page_size

    @property
    def available_tokens(self) -> int:
        """Free now, or freeable by evicting unlocked prefix-cache entries."""
        return self.free_tokens + self.prefix_cache.evictable_size

    @property
    def capacity_tokens(self) -> int:
        return self.num_pages * self.page_size

    def page_counts(self) -> dict[str, int]:
        """Where the pages are: free, kept by the prefix cache, or held by live requests."""
        free = len(self._free_pages)
        cached = (self.prefix_cache.evictable_size + self.prefix_cache.protected_size) \
            // self.page_size
        return {"total_pages": self.num_pages, "free_pages": free, "cached_pages": cached,
                "request_pages": self.num_pages - free - cached}

    def match(self, req: Req) -> None:
        """Reuse the longest cached prefix; at least the last prompt token is always computed."""
        result = self.prefix_cache.match_prefix(req.input_ids[: len(req.input_ids) - 1])
        self.prefix_cache.lock(result.handle)
        req.cache_handle = result.handle
        req.shared_len = req.cached_len = req.alloc_len = req.cached_tokens = result.length
        self._set_slots(req.table_idx, 0, result.slots)

    def unmatch(self, req: Req) -> None:
        """Undo `match` for a request that could not start after all."""
        self.prefix_cache.unlock(req.cache_handle)
        req.cache_handle = None
        req.shared_len = req.cached_len = req.alloc_len = 0

    def allocate(self, req: Req, upto: int) -> bool:
        """Give positions [alloc_len, upto) of the request slots; False if memory is short."""
        if upto <= req.alloc_len:
            return True
        pages = self._take_pages(cdiv(upto - req.alloc_len, self.page_size))
        if pages is None:
            return False
        offsets = torch.arange(self.page_size)
        slots = (torch.tensor(pages)[:, None] * self.page_size + offsets).flatten()
        self._set_slots(req.table_idx, req.alloc_len, slots)
        req.alloc_len += len(slots)
        return True

    def _set_slots(self, row: int, start: int, slots: torch.Tensor) -> None:
        """page_table[row, start : start + len(slots)] = slots."""
        self.host_table[row, start : start + len(slots)] = slots
        if self.host_table is not self.page_table:
            copy_to_device(self.page_table[row, start : start + len(slots)],
                           self.host_table[row, start : start + len(slots)])

    def release(self, req: Req, finished: bool) -> None:
        """Offer the request's computed prefix to the prefix cache; free what no one keeps.

        finished=False (after a prefill): the request keeps running on the cached copy.
        """
        row = self.host_table[req.table_idx]
        aligned = req.cached_len // self.page_size * self.page_size
        slots = row[: req.alloc_len].long()
        inserted = self.prefix_cache.insert(req.input_ids[:aligned], slots[:aligned])
        self.prefix_cache.unlock(req.cache_handle)
        req.cache_handle = None
        # The cache already had positions [shared_len, had): our copies there are duplicates.
        self._free_slots(slots[req.shared_len : max(inserted.had, req.shared_len)])
        if finished:
            kept = max(inserted.owned, inserted.had, req.shared_len)
            self._free_slots(slots[kept:])
            req.shared_len = req.alloc_len = 0
            return
        result = self.prefix_cache.match_prefix(req.input_ids[:aligned])
        self.prefix_cache.lock(result.handle)
        req.cache_handle = result.handle
        self._set_slots(req.table_idx, 0, result.slots)
        req.shared_len = result.length

    def _take_pages(self, n: int) -> list[int] | None:
        if n > len(self._free_pages):
            short = (n - len(self._free_pages)) * self.page_size
            if short > self.prefix_cache.evictable_size:
                return None
            self._free_slots(self.prefix_cache.evict(short))
        if n > len(self._free_pages):
            return None
        return [self._free_pages.pop() for _ in range(n)]

    def _free_slots(self, slots: torch.Tensor) -> None:
        if len(slots) == 0:
            return
        if len(slots) % self.page_size != 0:
            raise RuntimeError(f"freeing {len(slots)} slots, not whole pages of {self.page_size}")
        pages = slots.reshape(-1, self.page_size)[:, 0] // self.page_size
        self._free_pages.extend(pages.tolist())

    def flush(self) -> None:
        self._free_slots(self.prefix_cache.reset())

    def check_integrity(self, running: list[Req]) -> None:
        """Every page is free, owned by the prefix cache, or owned by one running request."""
        self.prefix_cache.check_integrity()
        owned_by_reqs = sum(r.alloc_len - r.shared_len for r in running)
        cached = self.prefix_cache.evictable_size + self.prefix_cache.protected_size
        total = self.free_tokens + cached + owned_by_reqs
        if total != self.capacity_tokens:
            raise RuntimeError(f"KV pages leaked: free {self.free_tokens} + cached {cached} + "
                               f"in use {owned_by_reqs} != {self.capacity_tokens} tokens")
        if len(set(self._free_pages)) != len(self._free_pages):
            raise RuntimeError("a page is on the free list twice")
