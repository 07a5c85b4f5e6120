"""Admitting waiting requests and computing their prompts (prefill), under a token budget.

Requests wait in arrival order. Each prefill batch takes requests from the head while the token
budget (--max-prefill-length) and the KV pool allow. A prompt longer than what is left of the
budget is cut into chunks (chunked prefill): the chunk runs now, the request stays at the head of
the queue and continues in the next prefill batch, so one huge prompt never stalls everyone else:
between two of its chunks the running requests decode (the scheduler's rule), and short prompts
that arrived behind it may go first in the next batch, within half of the budget.
"""

from __future__ import annotations

from collections import deque

from minisgl.core import Batch, Req

from .cache import CacheManager
from .table import TableManager


class PrefillManager:
    def __init__(self, cache: CacheManager, table: TableManager) -> None:
        self.cache = cache
        self.table = table
        self.waiting: deque[Req] = deque()

    def add(self, req: Req, front: bool = False) -> None:
        if front:
            self.waiting.appendleft(req)  # a retracted request goes first when memory frees up
        else:
            self.waiting.append(req)

    @property
    def runnable(self) -> bool:
        return bool(self.waiting)

    def schedule(self, budget: int, reserve_tokens: int) -> Batch | None:
        """The next prefill batch, or None if nothing can start now.

        reserve_tokens is left free for the running requests' next decode step, so admitting a
        new request does not immediately force one of them out.
        """
        reqs: list[Req] = []
        for req in list(self.waiting):
            fresh = req.table_idx < 0
            if budget <= 0 or (fresh and not self._admit(req)):
                break
            chunk = len(req.input_ids) - req.cached_len
            if reqs and chunk > budget:
                break  # a prompt past the budget waits for a batch of its own
            if not self._allocate(req, chunk, reserve_tokens):
                if fresh:  # hold nothing while waiting, so waiting requests cannot deadlock
                    self._unadmit(req)
                break
            req.extend_len = chunk
            reqs.append(req)
            budget -= chunk
            self.waiting.popleft()
        return Batch(reqs, "prefill") if reqs else None

    def _allocate(self, req: Req, chunk: int, reserve_tokens: int) -> bool:
        """Slots for the request's next `chunk` tokens, if that leaves reserve_tokens free."""
        return self.cache.available_tokens - chunk >= reserve_tokens and \
            self.cache.allocate(req, req.cached_len + chunk)

    def _admit(self, req: Req) -> bool:
        """Give a waiting request its page-table row and its cached prefix."""
        if self.table.num_free == 0:
            return False
        req.table_idx = self.table.allocate()
        self.cache.match(req)
        return True

    def _unadmit(self, req: Req) -> None:
        self.cache.unmatch(req)
        self.table.free(req.table_idx)
        req.table_idx = -1

    def abort(self, uid: int) -> Req | None:
        for req in self.waiting:
            if req.uid == uid:
                self.waiting.remove(req)
                return req
        return None
