"""Request bodies parsed without stalling the event loop (issue 28).

Validating a body costs time in proportion to how many values it holds: eight megabytes of
empty chat messages, stop strings or token ids take pydantic one to three seconds. On the event
loop that is one to three seconds in which no other connection is served, /health included. A
thread does not help: pydantic holds the GIL for the whole call, so the loop's thread never gets
it back in between.

So a small body (up to `inline_bytes`, 256 KiB: a few milliseconds at most) is parsed where it
is, and a larger one in a worker process of its own, `minisgl::body-parser`, started when the
first large body arrives. The process returns the validated request (or the ApiError) by
pickle; what it returns is small, because protocol.py's checks bound every count. Large bodies
wait their turn in that one process; at most `max_queued` may be waiting or parsing, more get a
503, so queued bodies cannot pile up in memory either.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TypeVar

from pydantic import BaseModel

from minisgl.utils import init_logger
from minisgl.utils.mp import setup_worker_process
from minisgl.utils.proctitle import set_process_title

from .protocol import ApiError, RequestLimits, parse_body

logger = init_logger(__name__)

T = TypeVar("T", bound=BaseModel)
INLINE_BYTES = 256 << 10  # parsed on the event loop: ~15 ms for the worst shape on a busy CPU
MAX_QUEUED = 4  # large bodies waiting for the parser process or in it


def _start_parser_process() -> None:
    setup_worker_process()  # ignores Ctrl-C, dies with the launcher
    set_process_title("body-parser")


class BodyParser:
    def __init__(self, inline_bytes: int = INLINE_BYTES, max_queued: int = MAX_QUEUED) -> None:
        self.inline_bytes = inline_bytes
        self.max_queued = max_queued
        self.queued = 0
        self._pool: ProcessPoolExecutor | None = None

    async def parse(self, cls: type[T], body: bytes, limits: RequestLimits | None) -> T:
        """`body` as a checked `cls` (protocol.parse_body), or the ApiError it raises."""
        if len(body) <= self.inline_bytes:
            return parse_body(cls, body, limits)
        if self.queued >= self.max_queued:
            raise ApiError(503, f"the server is busy parsing {self.queued} other large request "
                                f"bodies; retry in a moment", code="server_busy")
        self.queued += 1
        try:
            future = self._executor().submit(parse_body, cls, body, limits)
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:  # the process died (killed, out of memory): start anew
            logger.error("the body parser process died; a new one starts with the next body")
            self._pool = None
            raise ApiError(503, "the request body could not be parsed (the parser process "
                                "died); retry in a moment") from None
        finally:
            self.queued -= 1

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: a fresh interpreter, as for every other worker (launch.py says why)
            self._pool = ProcessPoolExecutor(1, mp_context=mp.get_context("spawn"),
                                             initializer=_start_parser_process)
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
