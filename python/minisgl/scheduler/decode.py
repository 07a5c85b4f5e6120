"""The running requests: one decode step generates one token for each of them.

Continuous batching: a request joins this set as soon as its prefill finishes and leaves it as
soon as it finishes, so the batch changes every step instead of waiting for its slowest member.
When the KV pool cannot give every running request its next slot, the newest requests are
retracted: their pages are released and they go back to the head of the waiting queue, to be
prefilled again (from their prompt plus what they generated so far) when memory frees up.
"""

from __future__ import annotations

from collections.abc import Callable

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

    def schedule(self, retract: Callable[[Req], None], free_waiting: Callable[[], bool]
                 ) -> Batch | None:
        """The decode batch. `retract` frees a running request that must give way for the
        others; `free_waiting` frees pages held by half-prefilled waiting requests."""
        while self.running:
            if all(self.cache.allocate(r, len(r.input_ids)) for r in self.running):
                break
            if free_waiting():
                continue  # a chunked prompt gave its pages back: running requests go first
            if len(self.running) == 1:
                raise RuntimeError("one request alone does not fit in the KV pool")
            retract(self.running.pop())  # the newest request gives way
        for req in self.running:
            req.cached_len, req.extend_len = len(req.input_ids) - 1, 1
        return Batch(list(self.running), "decode") if self.running else None

    def abort(self, uid: int) -> Req | None:
        for req in self.running:
            if req.uid == uid:
                self.running.remove(req)
                return req
        return None
