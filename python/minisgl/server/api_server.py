"""The HTTP API: OpenAI-compatible endpoints on FastAPI, served by uvicorn (chapter 14).

The endpoints live in three routers, each built from the `ServerDeps` they share (deps.py):

    routes_openai.py   POST /v1/chat/completions, POST /v1/completions, GET /v1/models
    routes_native.py   POST /generate (SGLang's)
    routes_ops.py      GET /health, /metrics, /version, /get_model_info, /get_server_info;
                       POST /flush_cache

This file puts them together: the startup and shutdown around them, the checks in front of them
and the shape of every error.

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
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import FrameType

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from minisgl import __version__
from minisgl.message.client import FrontendClient

from .args import ServerArgs
from .deps import ServerDeps
from .guard import RequestGuard, loopback_hosts
from .metrics import log_while_busy
from .protocol import ApiError, RequestLimits
from .routes_native import native_router
from .routes_openai import openai_router
from .routes_ops import ops_router

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


def create_app(client: FrontendClient, args: ServerArgs,
               dead_worker: Callable[[], str | None] = lambda: None) -> FastAPI:
    """The app serving one model with the settings in `args` (names, API key, limits);
    `dead_worker` names a worker process that has exited (launch.py's watchdog knows)."""
    deps = ServerDeps.build(client, args, dead_worker)
    app = FastAPI(title="minisgl", version=__version__, lifespan=lambda _: serving(deps))
    app.add_middleware(RequestGuard, max_body_bytes=args.max_body_bytes,
                       allowed_hosts=loopback_hosts(args.host, args.port), api_key=args.api_key,
                       body_timeout_s=args.body_timeout)
    add_error_handlers(app)
    # In this order, the routes (and /openapi.json) list as they did before the split
    for router in (ops_router(deps), openai_router(deps), native_router(deps)):
        app.include_router(router)
    return app


@asynccontextmanager
async def serving(deps: ServerDeps) -> AsyncIterator[None]:
    """The app's lifespan: start the client and learn the engine's limits before the first
    request; stop the busy log, the body parser and the client after the last."""
    client, args = deps.client, deps.args
    client.start()
    reply = await client.control("limits")  # the engine's vocabulary and context sizes
    deps.limits = RequestLimits.from_info(reply.info)
    await deps.status.latest(wait=30)  # the first numbers /health reports
    busy_log = None
    if args.log_interval > 0:
        busy_log = asyncio.get_running_loop().create_task(log_while_busy(
            deps.metrics, lambda: client.control("stats", timeout=5),
            lambda: client.open_requests > 0, args.log_interval))
    yield
    if busy_log is not None:
        busy_log.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await busy_log
    deps.parser.close()
    await client.aclose()


def add_error_handlers(app: FastAPI) -> None:
    """Every error in OpenAI's shape: ApiError as it says, unknown routes (404) and wrong
    methods (405) too."""
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(HTTPException, http_error)


async def api_error(_: Request, e: ApiError) -> JSONResponse:
    return JSONResponse(e.body, status_code=e.status)


async def http_error(request: Request, e: HTTPException) -> JSONResponse:
    message = {404: f"there is no endpoint {request.url.path}",
               405: f"{request.method} is not allowed on {request.url.path}"}
    error = ApiError(e.status_code, message.get(e.status_code, str(e.detail)),
                     code=_HTTP_CODES.get(e.status_code))
    return JSONResponse(error.body, status_code=e.status_code, headers=e.headers)


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
