"""The HTTP API: OpenAI-compatible endpoints on FastAPI, served by uvicorn (chapter 14).

    POST /v1/chat/completions   chat, streaming (SSE) or not
    POST /v1/completions        text completion, streaming or not
    GET  /v1/models             the served model
    POST /generate              SGLang's: text or token ids (or a list of either, a batch) and
                                sampling_params in; text, output_ids and meta_info out
    GET  /get_model_info        SGLang's: the model's path and sizes
    GET  /get_server_info       SGLang's: the server's settings, limits and scheduler counts
    GET  /version               the minisgl version
    GET  /metrics               Prometheus metrics (metrics.py)
    GET  /health                the scheduler's KV page counts, fresh or as last published
                                (health.py); 503 only when a worker is gone or silent for long
    POST /flush_cache           drop the prefix cache (only while idle); no body needed

A streaming response starts only after the request's first reply has arrived, so a request the
engine refuses (a prompt longer than the context, say) still gets a 4xx status and a JSON error. A
stream that fails later (the server shuts down) ends with an error event, then `data: [DONE]`.
Every error, 404 and 405 included, has OpenAI's shape {"error": {message, type, param, code}};
guard.py checks Host, the API key, Content-Type, body size and body time before an endpoint
runs; bodies.py parses a large body in a process of its own, so the event loop never stalls on it.

`n` answers to one prompt are n requests in the engine (choices.py): the first is sent alone, the
others once its prompt sits in the prefix cache, so the prompt is computed once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from minisgl import __version__
from minisgl.core import SamplingParams
from minisgl.message.client import FrontendClient, RequestStream
from minisgl.utils import init_logger

from .args import ServerArgs
from .bodies import BodyParser
from .choices import TokenLogprob, chat_logprobs, completion_logprobs, merge, start_choices
from .guard import RequestGuard, loopback_hosts
from .health import SchedulerStatus
from .metrics import CONTENT_TYPE, RequestTimer, ServerMetrics, log_while_busy
from .protocol import (
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    RequestLimits,
    choice_params,
)
from .stop import StopChecker

logger = init_logger(__name__)

COMPLETION_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
CHAT_DEFAULT_MAX_TOKENS = None  # chat: whatever the context and the KV pool leave
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}
T = TypeVar("T", bound=BaseModel)
T_item = TypeVar("T_item")


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


def create_app(client: FrontendClient, args: ServerArgs,
               dead_worker: Callable[[], str | None] = lambda: None) -> FastAPI:
    """The app serving one model with the settings in `args` (names, API key, limits);
    `dead_worker` names a worker process that has exited (launch.py's watchdog knows)."""
    # What clients may call the model: the name given with --served-model-name, else the name
    # it was asked for by (--model) and its folder. The first is the one the server reports.
    model_names = [args.served_model_name] if args.served_model_name else \
        [args.model_name, args.model_path]
    metrics = ServerMetrics(model_names[0])
    limits: RequestLimits | None = None
    parser = BodyParser()

    async def ask_stats(timeout: float) -> dict[str, int]:
        return (await client.control("stats", timeout=timeout)).info

    status = SchedulerStatus(ask_stats, dead_worker, lambda: client.closing)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        nonlocal limits
        client.start()
        reply = await client.control("limits")  # the engine's vocabulary and context sizes
        limits = RequestLimits(reply.info["vocab_size"], reply.info["max_seq_len"])
        await status.latest(wait=30)  # the first numbers /health reports
        busy_log = None
        if args.log_interval > 0:
            busy_log = asyncio.get_running_loop().create_task(log_while_busy(
                metrics, lambda: client.control("stats", timeout=5),
                lambda: client.open_requests > 0, args.log_interval))
        yield
        if busy_log is not None:
            busy_log.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await busy_log
        parser.close()
        await client.aclose()

    app = FastAPI(title="minisgl", version=__version__, lifespan=lifespan)
    app.add_middleware(RequestGuard, max_body_bytes=args.max_body_bytes,
                       allowed_hosts=loopback_hosts(args.host, args.port), api_key=args.api_key,
                       body_timeout_s=args.body_timeout)

    @app.exception_handler(ApiError)
    async def api_error(_: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body, status_code=e.status)

    @app.exception_handler(HTTPException)  # unknown routes (404), wrong methods (405)
    async def http_error(request: Request, e: HTTPException) -> JSONResponse:
        message = {404: f"there is no endpoint {request.url.path}",
                   405: f"{request.method} is not allowed on {request.url.path}"}
        error = ApiError(e.status_code, message.get(e.status_code, str(e.detail)),
                         code=_HTTP_CODES.get(e.status_code))
        return JSONResponse(error.body, status_code=e.status_code, headers=e.headers)

    async def body(request: Request, cls: type[T]) -> T:
        return await parser.parse(cls, await request.body(), limits)

    async def run(stream: RequestStream, stops: list[str], request: Request
                  ) -> AsyncGenerator[Piece]:
        """The request's pieces, timed for the metrics; the first one has arrived already."""
        return await first_and_rest(pieces(stream, stops, request, metrics.start_request()))

    def check_model(name: str | None) -> str:
        if name is not None and name not in model_names:
            raise ApiError(404, f"the model '{name}' does not exist; this server serves "
                                f"'{model_names[0]}'", param="model", code="model_not_found")
        return model_names[0]

    @app.get("/health")
    async def health() -> JSONResponse:
        report = await status.health()
        return JSONResponse(report.body, status_code=report.status)

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        stats = await status.latest()  # while a long step runs, the numbers from before it
        if stats is not None:
            metrics.scheduler.update(stats)
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": __version__}

    @app.get("/get_model_info")
    async def get_model_info() -> dict[str, Any]:
        assert limits is not None
        return {"model_path": args.model_path, "tokenizer_path": args.model_path,
                "served_model_name": model_names[0], "is_generation": True,
                "max_context_length": limits.max_seq_len, "vocab_size": limits.vocab_size}

    @app.get("/get_server_info")
    async def get_server_info() -> dict[str, Any]:
        return {"version": __version__, **args.public_settings(), "max_context_length":
                limits.max_seq_len if limits else None, "scheduler": await status.latest()}

    @app.post("/flush_cache")
    async def flush_cache() -> JSONResponse:
        reply = await client.control("flush_cache")
        if not reply.ok:
            raise ApiError(409, reply.error or "cannot flush the cache now")
        return JSONResponse({"status": "ok", **reply.info})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": model_names[0], "object": "model", "created": 0, "owned_by": "minisgl",
                "root": args.model_path, "max_model_len": limits.max_seq_len if limits else None}
        return {"object": "list", "data": [card]}

    async def answers(params: SamplingParams, n: int, prompt: dict[str, Any], stops: list[str],
                      request: Request) -> AsyncGenerator[tuple[int, Piece]]:
        """(choice index, piece) of the n answers to one prompt (choices.py); `prompt`: the
        keywords of client.submit. Refusals are raised here, before any byte is sent."""
        gens = await start_choices(
            lambda p: run(client.submit(p, **prompt), stops, request), params, n, choice_params)
        return merge(gens)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        req = await body(request, ChatCompletionRequest)
        model = check_model(req.model)
        params = req.sampling_params(CHAT_DEFAULT_MAX_TOKENS)
        gen = await answers(params, req.n, {"messages": req.chat()}, req.stop_strings, request)
        head = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
                "model": model}
        want_logprobs = params.logprobs is not None
        if not req.stream:
            choices, usage = await collect(gen, req.n)
            return {**head, "object": "chat.completion", "usage": usage, "choices": [
                {"index": i, "message": {"role": "assistant", "content": c.text},
                 "finish_reason": c.finish_reason,
                 "logprobs": chat_logprobs(c.logprobs) if want_logprobs else None}
                for i, c in enumerate(choices)]}
        chunk = {**head, "object": "chat.completion.chunk"}
        usage = Usage(req.n)

        def render(item: tuple[int, Piece]) -> list[dict[str, Any]]:
            index, piece = item
            out = []
            if piece.text or piece.logprobs:
                choice = {"index": index, "delta": {"content": piece.text}, "finish_reason": None}
                if want_logprobs:
                    choice["logprobs"] = chat_logprobs(piece.logprobs)
                out.append({**chunk, "choices": [choice]})
            if piece.finish_reason is not None:
                out.append({**chunk, "choices": [{"index": index, "delta": {},
                                                  "finish_reason": piece.finish_reason}]})
                if usage.add(piece) and req.include_usage:
                    out.append({**chunk, "choices": [], "usage": usage.total})
            return out

        roles = [{**chunk, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]} for i in range(req.n)]
        return sse_response(gen, render, first=roles)

    @app.post("/v1/completions")
    async def completions(request: Request):
        req = await body(request, CompletionRequest)
        model = check_model(req.model)
        params = req.sampling_params(COMPLETION_DEFAULT_MAX_TOKENS)
        prompt = req.one_prompt()
        gen = await answers(params, req.n, prompt_keywords(prompt), req.stop_strings, request)
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion",
                "created": int(time.time()), "model": model}
        want_logprobs = params.logprobs is not None
        if not req.stream:
            choices, usage = await collect(gen, req.n)
            return {**head, "usage": usage, "choices": [
                {"index": i, "text": c.text, "finish_reason": c.finish_reason,
                 "logprobs": completion_logprobs(c.logprobs, 0) if want_logprobs else None}
                for i, c in enumerate(choices)]}
        usage = Usage(req.n)
        offsets = [0] * req.n  # characters of each answer's token texts so far (text_offset)

        def render(item: tuple[int, Piece]) -> list[dict[str, Any]]:
            index, piece = item
            out = []
            if piece.text or piece.logprobs or piece.finish_reason is not None:
                logprobs = None
                if want_logprobs:
                    logprobs = completion_logprobs(piece.logprobs, offsets[index])
                    offsets[index] += sum(len(t.text) for t in piece.logprobs)
                out.append({**head, "choices": [{"index": index, "text": piece.text,
                                                 "logprobs": logprobs,
                                                 "finish_reason": piece.finish_reason}]})
            if piece.finish_reason is not None and usage.add(piece) and req.include_usage:
                out.append({**head, "choices": [], "usage": usage.total})
            return out

        return sse_response(gen, render)

    @app.post("/generate")
    async def generate(request: Request):
        req = await body(request, GenerateRequest)
        if req.batched:
            return await generate_batch(req, request)
        n = req.sampling_params.n
        gen = await answers(req.to_sampling_params(), n, prompt_keywords(req.prompts()[0]),
                            req.stop_strings, request)
        rid = uuid.uuid4().hex
        if not req.stream:
            choices, _ = await collect(gen, n)
            outs = [{"text": c.text, "output_ids": c.token_ids,
                     "meta_info": meta_info(f"{rid}-{i}" if n > 1 else rid, c.last,
                                            len(c.token_ids))}
                    for i, c in enumerate(choices)]
            return outs if n > 1 else outs[0]  # SGLang answers n > 1 with a list
        # As SGLang's, every event holds the text and output ids so far, not just the new part;
        # with n > 1 each event is one answer's, with its "index".
        answers_so_far = [Answer() for _ in range(n)]

        def render(item: tuple[int, Piece]) -> list[dict[str, Any]]:
            index, piece = item
            answer = answers_so_far[index]
            answer.add(piece)
            event = {"text": answer.text, "output_ids": list(answer.token_ids),
                     "meta_info": meta_info(f"{rid}-{index}" if n > 1 else rid, piece,
                                            len(answer.token_ids))}
            return [{**event, "index": index} if n > 1 else event]

        return sse_response(gen, render)

    async def generate_batch(req: GenerateRequest, request: Request) -> list[dict[str, Any]]:
        """SGLang's batch: a list of prompts gets a list of answers, the n answers of each
        prompt in a row. The prompts run together; if one is refused, the others are aborted
        and the refusal is the answer (protocol.py refuses a streamed batch)."""
        n, params = req.sampling_params.n, req.to_sampling_params()

        async def one(prompt: str | list[int]) -> list[Answer]:
            gen = await answers(params, n, prompt_keywords(prompt), req.stop_strings, request)
            return (await collect(gen, n))[0]

        try:
            async with asyncio.TaskGroup() as group:  # a failure cancels the others
                tasks = [group.create_task(one(prompt)) for prompt in req.prompts()]
        except BaseExceptionGroup as failed:
            raise failed.exceptions[0] from None
        rid = uuid.uuid4().hex
        done = [answer for task in tasks for answer in task.result()]
        return [{"text": a.text, "output_ids": a.token_ids,
                 "meta_info": meta_info(f"{rid}-{i}", a.last, len(a.token_ids))}
                for i, a in enumerate(done)]

    return app


def prompt_keywords(prompt: str | list[int]) -> dict[str, Any]:
    """client.submit's keyword for a completion prompt: text (encoded by a tokenizer worker)
    or token ids."""
    return {"text": prompt} if isinstance(prompt, str) else {"input_ids": prompt}


def meta_info(rid: str, piece: Piece, completion_tokens: int) -> dict[str, Any]:
    """SGLang's meta_info of a /generate answer (so far): finish_reason is null until the last
    event, then {"type": "stop"} or {"type": "length", "length": tokens generated}."""
    reason: dict[str, Any] | None = None
    if piece.finish_reason is not None:
        reason = {"type": piece.finish_reason}
        if piece.finish_reason == "length":
            reason["length"] = completion_tokens
    return {"id": rid, "finish_reason": reason, "prompt_tokens": piece.prompt_tokens,
            "completion_tokens": completion_tokens, "cached_tokens": piece.cached_tokens}


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


class ApiServer(uvicorn.Server):
    """uvicorn, plus: on SIGTERM or Ctrl-C every open request ends at once with an error (a
    stream gets an error event and [DONE]), so the graceful shutdown that follows has no
    connection left to wait for."""

    def __init__(self, config: uvicorn.Config, client: FrontendClient) -> None:
        super().__init__(config)
        self.client = client

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of the event loop's thread: hand the work
        # to the loop rather than touch its queues from here.
        asyncio.get_running_loop().call_soon_threadsafe(self.client.fail_all,
                                                        "the server is shutting down")
        super().handle_exit(sig, frame)
