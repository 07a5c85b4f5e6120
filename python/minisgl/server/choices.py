"""Several answers to one prompt (`n`), and log-probabilities in OpenAI's shapes (chapter 16).

n answers are n requests in the engine. Sent together, they would land in one prefill batch and
each compute the prompt itself, since none of them is in the prefix cache yet. So the first is
sent alone and its first token awaited: by then the scheduler has put its prompt in the prefix
cache, and the other n-1, sent next, find it there (their `cached_tokens` show it). Each answer is
a stream of pieces; `merge` interleaves them, tagged with the answer's index, as they come.

Log-probabilities come from the engine with each token (TokenOutput.logprob, top_ids,
top_logprobs) and the detokenizer adds each token's text on its own (UserReply.token_texts).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, TypeVar

from minisgl.core import SamplingParams

P = TypeVar("P")


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's text and log-prob, and the most likely tokens' (most likely
    first)."""

    text: str
    logprob: float
    top: list[tuple[str, float]]

    @classmethod
    def of_reply(cls, reply: Any) -> list[TokenLogprob]:
        """The reply's token log-prob as a list of zero or one (zero when not asked)."""
        if reply.logprob is None or reply.token_texts is None:
            return []
        texts = reply.token_texts
        return [cls(texts[0], reply.logprob, list(zip(texts[1:], reply.top_logprobs or [])))]


def _utf8(text: str) -> list[int]:
    return list(text.encode("utf-8", errors="replace"))


def chat_logprobs(tokens: list[TokenLogprob]) -> dict[str, Any]:
    """choices[].logprobs of a chat completion (or of one streamed chunk)."""
    return {"content": [{"token": t.text, "logprob": t.logprob, "bytes": _utf8(t.text),
                         "top_logprobs": [{"token": text, "logprob": lp, "bytes": _utf8(text)}
                                          for text, lp in t.top]}
                        for t in tokens],
            "refusal": None}


def completion_logprobs(tokens: list[TokenLogprob], offset: int) -> dict[str, Any]:
    """choices[].logprobs of a text completion; `offset`: characters of the answer before these
    tokens. As OpenAI's, each top_logprobs dict also holds the sampled token (so up to
    logprobs + 1 entries)."""
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.text)
    return {"tokens": [t.text for t in tokens], "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [dict([*t.top, (t.text, t.logprob)] if t.text not in dict(t.top)
                                  else t.top) for t in tokens],
            "text_offset": offsets}


async def start_choices(start: Callable[[SamplingParams], Awaitable[AsyncGenerator[P]]],
                        params: SamplingParams, n: int,
                        choice: Callable[[SamplingParams, int], SamplingParams]
                        ) -> list[AsyncGenerator[P]]:
    """The n answers' piece streams, each with its first piece arrived (so a refusal is raised
    here, before any byte is sent). `start` submits one request; `choice` gives answer i its
    parameters (its own seed)."""
    gens: list[AsyncGenerator[P]] = []
    try:
        gens.append(await start(choice(params, 0)))  # its prompt is in the prefix cache now
        starting = [asyncio.ensure_future(start(choice(params, i))) for i in range(1, n)]
        try:
            for task in starting:
                gens.append(await task)
        finally:
            for task in starting:  # after a failure: stop and close the others
                if not task.done():
                    task.cancel()
                elif not task.cancelled() and task.exception() is None and \
                        task.result() not in gens:
                    await task.result().aclose()
    except BaseException:
        for gen in gens:
            await gen.aclose()
        raise
    return gens


async def merge(gens: list[AsyncGenerator[P]]) -> AsyncGenerator[tuple[int, P]]:
    """(answer index, piece) from every stream as they arrive; an error in one ends all (the
    others are closed, which aborts their requests)."""
    queue: asyncio.Queue[tuple[int, P | None, BaseException | None]] = asyncio.Queue()

    async def pump(index: int, gen: AsyncGenerator[P]) -> None:
        try:
            async with aclosing(gen):
                async for piece in gen:
                    queue.put_nowait((index, piece, None))
        except Exception as e:
            queue.put_nowait((index, None, e))
            return
        queue.put_nowait((index, None, None))

    tasks = [asyncio.ensure_future(pump(i, gen)) for i, gen in enumerate(gens)]
    try:
        left = len(tasks)
        while left:
            index, piece, error = await queue.get()
            if error is not None:
                raise error
            if piece is None:
                left -= 1
            else:
                yield index, piece
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
