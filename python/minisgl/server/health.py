"""What /health reports: the scheduler's last published numbers, and whether it still answers.

The scheduler reads messages only between two steps, so while one long step runs (a prefill of
thousands of tokens on a CPU takes tens of seconds) a question sent to it waits that long. A
/health that waited for the answer kept load balancers waiting too, and one that gave up after a
few seconds called a busy server dead. So a question goes out, and /health waits for its answer
only briefly (`fresh_wait_s`): a scheduler between steps answers in milliseconds and the numbers
are fresh; a busy one has not answered yet, and /health reports the numbers it answered last,
with their age. Only one question is out at a time: while it waits, every /health answers at
once from what is known. Numbers less than `min_refresh_s` old are not asked for again, so a
client that floods /health (which needs no API key) sends the scheduler at most 20 questions a
second.

The rule (docs/appendix/serving.md): 503 when a worker process has exited, when the server is
shutting down, or when the scheduler has been asked and not answered for `stale_s` seconds (two
minutes: far longer than any step of a working engine); 200 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from minisgl.utils import init_logger

logger = init_logger(__name__)

STALE_S = 120.0
# 50 ms: long enough for a scheduler between two steps to answer (a few ms), short enough that
# /health answers within 100 ms while a step runs (it then reports the last numbers)
FRESH_WAIT_S = 0.05
MIN_REFRESH_S = 0.05


@dataclass(frozen=True)
class Health:
    status: int  # the HTTP status: 200 or 503
    body: dict


class SchedulerStatus:
    """The scheduler's numbers (`stats`) as it answered them last, and when.

    `ask` asks the scheduler once (it raises TimeoutError if the answer does not come in time);
    `dead_worker` names a worker process that has exited (None while all run); `closing` says
    why the server takes no more requests (None while it does)."""

    def __init__(self, ask: Callable[[float], Awaitable[dict[str, int]]],
                 dead_worker: Callable[[], str | None] = lambda: None,
                 closing: Callable[[], str | None] = lambda: None, stale_s: float = STALE_S,
                 fresh_wait_s: float = FRESH_WAIT_S, min_refresh_s: float = MIN_REFRESH_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._ask = ask
        self._dead_worker = dead_worker
        self._closing = closing
        self.stale_s = stale_s
        self.fresh_wait_s = fresh_wait_s
        self.min_refresh_s = min_refresh_s
        self._clock = clock
        self.stats: dict[str, int] | None = None
        self.answered_at: float | None = None
        # When the scheduler was asked and has not answered since (None: it has answered the
        # last question). A question that times out is asked again; this time stays.
        self.waiting_since: float | None = None
        self._question: asyncio.Future | None = None

    async def latest(self, wait: float | None = None) -> dict[str, int] | None:
        """The freshest numbers known: a new question is asked and its answer awaited up to
        `wait` seconds (default `fresh_wait_s`); while an earlier question is still out (the
        scheduler is busy) or the last answer is very recent, the last numbers at once. None
        before the first answer."""
        if self._question is not None and not self._question.done():
            return self.stats
        if self.answered_at is not None and self._clock() - self.answered_at < self.min_refresh_s:
            return self.stats
        self._question = asyncio.ensure_future(self._ask_once())
        with contextlib.suppress(TimeoutError):
            # shield: a caller that stops waiting leaves the question out for the next one
            await asyncio.wait_for(asyncio.shield(self._question),
                                   self.fresh_wait_s if wait is None else wait)
        return self.stats

    async def _ask_once(self) -> None:
        if self.waiting_since is None:
            self.waiting_since = self._clock()
        try:
            stats = await self._ask(self.stale_s)
        except TimeoutError:
            return
        except Exception:  # a bug, not a slow scheduler: say so, ask again next time
            logger.exception("asking the scheduler for its stats failed")
            return
        self.stats, self.answered_at, self.waiting_since = stats, self._clock(), None

    async def health(self) -> Health:
        await self.latest()
        now = self._clock()
        reason = None
        if (name := self._dead_worker()) is not None:
            reason = f"the {name} process has exited"
        elif (why := self._closing()) is not None:
            reason = why
        elif self.waiting_since is not None and now - self.waiting_since > self.stale_s:
            reason = (f"the scheduler has not answered for {now - self.waiting_since:.0f} s "
                      f"(more than {self.stale_s:.0f} s)")
        elif self.stats is None:
            reason = "the scheduler has not answered yet"
        if reason is not None:
            return Health(503, {"status": "unavailable", "reason": reason})
        assert self.answered_at is not None
        # stats_age_s: 0 when the scheduler just answered; while a long step runs, how old
        # the numbers are (the scheduler is busy, not dead)
        return Health(200, {"status": "ok", **self.stats,
                            "stats_age_s": round(now - self.answered_at, 3)})
