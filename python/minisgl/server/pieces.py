"""From the engine's replies to an answer: pieces of new text, whole answers and their usage.

A request's replies become `Piece`s: the new text with stop strings applied (stop.py), its token
ids and, on the last one, the finish reason and the usage counts. A streaming endpoint renders
each piece as an event; the others put the pieces together into `Answer`s (`collect`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from minisgl.message.client import RequestStream
from minisgl.utils import init_logger

from .choices import TokenLogprob
from .metrics import RequestTimer
from .protocol import ApiError
from .stop import StopChecker

logger = init_logger(__name__)


@dataclass
class Piece:
    """New text of a request, with stop strings applied; the last piece has finish_reason."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = 0
    cached_tokens: int = 0
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of token_ids, when asked
    # >>> ch24
    spec_verify_ct: int = 0  # speculative steps of the request so far (chapter 24)
    # <<< ch24


async def pieces(stream: RequestStream, stops: list[str], request: Request,
                 timer: RequestTimer) -> AsyncGenerator[Piece]:
    """Run one request to its end. Raises ApiError if the engine refused it (first reply)."""
    checker, completion = StopChecker(stops), 0
    try:
        async for reply in stream:
            if reply.error is not None:  # "abort" with an error: the server is shutting down
                timer.done = True  # a failed request is not a finished one
                raise ApiError(503 if reply.finish_reason == "abort" else 400, reply.error)
            new_ids = [] if reply.token is None else [reply.token]
            if new_ids:
                timer.token(reply.prompt_tokens, reply.cached_tokens)
            logprobs = TokenLogprob.of_reply(reply)
            completion += len(new_ids)
            text = checker.feed(reply.text)
            reason = "stop" if checker.stopped else reply.finish_reason
            counts = {"prompt_tokens": reply.prompt_tokens, "cached_tokens": reply.cached_tokens,
                      "logprobs": logprobs}
            # >>> ch24
            counts["spec_verify_ct"] = reply.spec_verify_ct
            # <<< ch24
            if reason is None and not reply.finished:
                if await request.is_disconnected():
                    logger.info("request %d: the client left; aborting", stream.uid)
                    return
                if text or new_ids:
                    yield Piece(text, new_ids, **counts)
                continue
            usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": completion,
                     "total_tokens": reply.prompt_tokens + completion,
                     "prompt_tokens_details": {"cached_tokens": reply.cached_tokens}}
            timer.finish(reason or "stop")
            yield Piece(text + checker.flush(), new_ids, reason or "stop", usage, **counts)
            return
    finally:
        timer.finish("abort")  # the client left (nothing happens if it has finished)
        stream.close()  # aborts the request unless it finished


async def first_and_rest(gen: AsyncGenerator[Piece]) -> AsyncGenerator[Piece]:
    """Wait for the first piece now (errors surface before any byte is sent), then the rest.

    Closing the returned generator closes `gen`, whose `finally` aborts an unfinished request;
    the endpoints close it with `aclosing`, so that never waits for the garbage collector."""
    try:
        first = await anext(gen)
    except StopAsyncIteration:  # the client left before the first piece
        raise ApiError(499, "the client closed the connection") from None

    async def chained() -> AsyncGenerator[Piece]:
        async with aclosing(gen):
            yield first
            async for piece in gen:
                yield piece

    return chained()


@dataclass
class Answer:
    """One answer put together from its pieces."""

    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    last: Piece | None = None

    def add(self, piece: Piece) -> None:
        self.text += piece.text
        self.token_ids += piece.token_ids
        self.logprobs += piece.logprobs
        self.last = piece

    @property
    def finish_reason(self) -> str | None:
        return None if self.last is None else self.last.finish_reason


class Usage:
    """The usage of n answers to one prompt: the prompt counts once (as computed for the first
    answer, whose prefill the others share), the completions add up."""

    def __init__(self, n: int) -> None:
        self.left = n
        self.total: dict[str, Any] = {}

    def add(self, last: Piece) -> bool:
        """Count an answer's last piece; True once every answer is in."""
        if not self.total:
            self.total = dict(last.usage)
        else:
            done = self.total["completion_tokens"] + last.usage["completion_tokens"]
            self.total.update(completion_tokens=done,
                              total_tokens=self.total["prompt_tokens"] + done)
        self.left -= 1
        return self.left == 0


async def collect(gen: AsyncGenerator[tuple[int, Piece]], n: int
                  ) -> tuple[list[Answer], dict[str, Any]]:
    """Whole non-streamed answers, and their usage."""
    answers = [Answer() for _ in range(n)]
    async with aclosing(gen):
        async for index, piece in gen:
            answers[index].add(piece)
    usage = Usage(n)
    for answer in answers:
        assert answer.last is not None
        usage.add(answer.last)
    return answers, usage.total
