"""Server-sent events: how every streaming endpoint sends its answer.

The response starts only once the first piece has arrived (pieces.first_and_rest), so an error
before it is a plain HTTP error. An error after it cannot change the status any more: it is sent
as one more event, and the stream still ends with `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any, TypeVar

from fastapi.responses import StreamingResponse

from .protocol import ApiError

T_item = TypeVar("T_item")


def sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def sse_response(gen: AsyncGenerator[T_item], render: Callable[[T_item], list[dict[str, Any]]],
                 first: list[dict[str, Any]] | None = None) -> StreamingResponse:
    """Server-sent events: `first`, then what `render` makes of each item, then [DONE]."""

    async def events() -> AsyncIterator[bytes]:
        for data in first or []:
            yield sse(data)
        try:
            async with aclosing(gen):
                async for item in gen:
                    for data in render(item):
                        yield sse(data)
        except ApiError as e:  # the status is sent already: the error goes in the stream
            yield sse(e.body)
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")
