"""The HTTP API: OpenAI-compatible endpoints on FastAPI, served by uvicorn (chapter 14).

    POST /v1/chat/completions   chat, streaming (SSE) or not
    POST /v1/completions        text completion, streaming or not
    GET  /v1/models             the served model
    POST /generate              SGLang-style: text or token ids in, text and token ids out
    GET  /health                a round trip through every process; KV page counts
    POST /flush_cache           drop the prefix cache (only while idle)

A streaming response starts only after the request's first reply has arrived, so a request the
engine refuses (a prompt longer than the context, say) still gets a 4xx status and a JSON error.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from minisgl.utils import init_logger

from .frontend import FrontendClient, RequestStream
from .protocol import (
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    parse_body,
)
from .stop import StopChecker

logger = init_logger(__name__)

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
CHAT_DEFAULT_MAX_TOKENS = 1 << 30  # chat: whatever the context has left (fit_max_tokens)


@dataclass
class Piece:
    """New text of a request, with stop strings applied; the last piece has finish_reason."""

    text: str
    token_ids: list[int]
    finish_reason: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)


async def pieces(stream: RequestStream, stops: list[str], request: Request) -> AsyncGenerator[Piece]:
    """Run one request to its end. Raises ApiError if the engine refused it (first reply)."""
    checker, completion = StopChecker(stops), 0
    try:
        async for reply in stream:
            if reply.error is not None:
                raise ApiError(400, reply.error)
            completion += len(reply.token_ids)
            text = checker.feed(reply.text)
            reason = "stop" if checker.stopped else reply.finish_reason
            if reason is None and not reply.finished:
                if await request.is_disconnected():
                    logger.info("request %d: the client left; aborting", stream.uid)
                    return
                if text or reply.token_ids:
                    yield Piece(text, reply.token_ids)
                continue
            usage = {"prompt_tokens": reply.prompt_tokens, "completion_tokens": completion,
                     "total_tokens": reply.prompt_tokens + completion,
                     "prompt_tokens_details": {"cached_tokens": reply.cached_tokens}}
            yield Piece(text + checker.flush(), reply.token_ids, reason or "stop", usage)
            return
    finally:
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


def sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def sse_response(gen: AsyncGenerator[Piece], render: Callable[[Piece], list[dict[str, Any]]],
                 first: dict[str, Any] | None = None) -> StreamingResponse:
    """Server-sent events: `first`, then what `render` makes of each piece, then [DONE]."""

    async def events() -> AsyncIterator[bytes]:
        if first is not None:
            yield sse(first)
        async with aclosing(gen):
            async for piece in gen:
                for data in render(piece):
                    yield sse(data)
        yield sse("[DONE]")

    return StreamingResponse(events(), media_type="text/event-stream")


def create_app(client: FrontendClient, model_names: list[str]) -> FastAPI:
    """The app for one served model; model_names[0] is the name /v1/models reports."""

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        client.start()
        yield
        client.close()

    app = FastAPI(title="minisgl", lifespan=lifespan)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body, status_code=e.status)

    def check_model(name: str | None) -> str:
        if name is not None and name not in model_names:
            raise ApiError(404, f"the model '{name}' does not exist; this server serves "
                                f"'{model_names[0]}'", param="model", code="model_not_found")
        return model_names[0]

    @app.get("/health")
    async def health() -> JSONResponse:
        try:
            reply = await client.control("stats", timeout=10)
        except TimeoutError:
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ok", **reply.info})

    @app.post("/flush_cache")
    async def flush_cache() -> JSONResponse:
        reply = await client.control("flush_cache")
        if not reply.ok:
            raise ApiError(409, reply.error or "cannot flush the cache now")
        return JSONResponse({"status": "ok", **reply.info})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": model_names[0], "object": "model", "created": 0, "owned_by": "minisgl"}
        return {"object": "list", "data": [card]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        req = parse_body(ChatCompletionRequest, await request.body())
        model = check_model(req.model)
        params = req.sampling_params(CHAT_DEFAULT_MAX_TOKENS)
        stream = client.submit(params, messages=req.chat(),
                               fit_max_tokens=req.asked_max_tokens is None)
        gen = await first_and_rest(pieces(stream, req.stop_strings, request))
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
                "model": model}
        if not req.stream:
            text, last, _ = await collect(gen)
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "finish_reason": last.finish_reason, "logprobs": None}
            return {**head, "object": "chat.completion", "choices": [choice], "usage": last.usage}
        include_usage = bool(req.stream_options and req.stream_options.include_usage)
        chunk = {**head, "object": "chat.completion.chunk"}

        def render(piece: Piece) -> list[dict[str, Any]]:
            out = []
            if piece.text:
                out.append({**chunk, "choices": [{"index": 0, "delta": {"content": piece.text},
                                                  "finish_reason": None}]})
            if piece.finish_reason is not None:
                out.append({**chunk, "choices": [{"index": 0, "delta": {},
                                                  "finish_reason": piece.finish_reason}]})
                if include_usage:
                    out.append({**chunk, "choices": [], "usage": piece.usage})
            return out

        role = {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                      "finish_reason": None}]}
        return sse_response(gen, render, first=role)

    @app.post("/v1/completions")
    async def completions(request: Request):
        req = parse_body(CompletionRequest, await request.body())
        model = check_model(req.model)
        prompt = req.one_prompt()
        params = req.sampling_params(COMPLETION_DEFAULT_MAX_TOKENS)
        stream = (client.submit(params, text=prompt) if isinstance(prompt, str)
                  else client.submit(params, input_ids=prompt))
        gen = await first_and_rest(pieces(stream, req.stop_strings, request))
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": model}
        if not req.stream:
            text, last, _ = await collect(gen)
            choice = {"index": 0, "text": text, "finish_reason": last.finish_reason,
                      "logprobs": None}
            return {**head, "choices": [choice], "usage": last.usage}
        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        def render(piece: Piece) -> list[dict[str, Any]]:
            out = []
            if piece.text or piece.finish_reason is not None:
                out.append({**head, "choices": [{"index": 0, "text": piece.text, "logprobs": None,
                                                 "finish_reason": piece.finish_reason}]})
            if piece.finish_reason is not None and include_usage:
                out.append({**head, "choices": [], "usage": piece.usage})
            return out

        return sse_response(gen, render)

    @app.post("/generate")
    async def generate(request: Request):
        req = parse_body(GenerateRequest, await request.body())
        if (req.text is None) == (req.input_ids is None):
            raise ApiError(400, "give exactly one of 'text' and 'input_ids'")
        if req.input_ids is not None and not req.input_ids:
            raise ApiError(400, "'input_ids' is empty", param="input_ids")
        params = req.sampling_params(COMPLETION_DEFAULT_MAX_TOKENS)
        stream = client.submit(params, text=req.text, input_ids=req.input_ids)
        gen = await first_and_rest(pieces(stream, req.stop_strings, request))
        if not req.stream:
            text, last, token_ids = await collect(gen)
            return {"text": text, "token_ids": token_ids, "finish_reason": last.finish_reason,
                    "usage": last.usage}

        return sse_response(gen, lambda piece: [{
            "text": piece.text, "token_ids": piece.token_ids,
            "finish_reason": piece.finish_reason, "usage": piece.usage or None}])

    return app


async def collect(gen: AsyncIterator[Piece]) -> tuple[str, Piece, list[int]]:
    """A whole non-streamed answer: its text, its last piece (reason, usage), its tokens."""
    text, token_ids = "", []
    async for piece in gen:
        text += piece.text
        token_ids += piece.token_ids
        last = piece
    return text, last, token_ids
