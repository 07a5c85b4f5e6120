"""The running requests: one decode step generates one token for each of them.

Continuous batching: a request joins this set as soon as its prefill finishes and leaves it as
soon as it finishes, so the batch changes every step instead of waiting for its slowest member.
When the KV pool cannot give every running request its next slot, the scheduler retracts the
newest requests: their pages are released and they go back to the head of the waiting queue, to
be prefilled again (from their prompt plus what they generated so far) when memory frees up.
"""

from __future__ import annotations

from minisgl.core import Batch, Req

from .cache import CacheManager


class DecodeManager:
    def __init__(self, cache: CacheManager) -> None:
        self.cache = cache
        self.running: list[Req] = []

    @property
    def runnable(self) -> bool:
        return bool(self.running)

    def add(self, req: Req) -> None:
        self.running.append(req)

    def remove(self, req: Req) -> None:
        self.running.remove(req)

    def allocate_next_slots(self) -> bool:
        """Give every running request a KV slot for its next token; False if the pool ran out
        (the scheduler then decides who gives way, and calls this again)."""
        # Most steps need no new page (one in page_size does): skip the call for those.
        return all(len(r.input_ids) <= r.alloc_len or self.cache.allocate(r, len(r.input_ids))
                   for r in self.running)

    def batch(self) -> Batch | None:
        """The decode batch: each running request computes its last token."""
        for req in self.running:
            req.cached_len, req.extend_len = len(req.input_ids) - 1, 1
        return Batch(list(self.running), "decode") if self.running else None

    def abort(self, uid: int) -> Req | None:
        for req in self.running:
            if req.uid == uid:
                self.running.remove(req)
                return req
        return None
