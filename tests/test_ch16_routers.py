"""Chapter 16: the API server's routers, each on its own over a fake frontend client.

No engine and no socket: every router is built from a `ServerDeps` whose client answers from a
script, mounted on a bare FastAPI app, and called through ASGI directly (httpx, which FastAPI's
TestClient needs, is not a dependency). The last tests check that `create_app` assembles the
three with the checks and the startup around them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI

from minisgl.core import SamplingParams
from minisgl.message.frontend import ControlReply, UserReply
from minisgl.server.api_server import add_error_handlers, create_app
from minisgl.server.args import ServerArgs
from minisgl.server.deps import ServerDeps
from minisgl.server.protocol import RequestLimits
from minisgl.server.routes_native import native_router
from minisgl.server.routes_openai import openai_router
from minisgl.server.routes_ops import ops_router

WORDS = [(11, "Hello"), (12, " there"), (13, " friend")]  # what the fake engine always answers
REFUSED = "too long"  # a prompt holding this is refused, as the engine refuses a long one


class FakeStream:
    """A request's scripted replies; `close` records that the request was let go."""

    def __init__(self, uid: int, replies: list[UserReply]) -> None:
        self.uid, self._replies, self.closed = uid, replies, False

    def __aiter__(self) -> FakeStream:
        return self

    async def __anext__(self) -> UserReply:
        if not self._replies:
            raise StopAsyncIteration
        return self._replies.pop(0)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeClient:
    """FrontendClient's surface, answered at once: every prompt gets WORDS (cut at max_tokens)."""

    flush_error: str | None = None  # set: the scheduler refuses to flush, with this reason
    closing: str | None = None
    open_requests: int = 0
    started: bool = False
    closed: bool = False
    submitted: list[dict[str, Any]] = field(default_factory=list)
    streams: list[FakeStream] = field(default_factory=list)

    def start(self) -> None:
        self.started = True

    async def aclose(self) -> None:
        self.closed = True

    async def control(self, command: str, timeout: float = 30.0) -> ControlReply:
        if command == "limits":
            return ControlReply(0, True, {"vocab_size": 100, "max_seq_len": 64})
        if command == "stats":
            return ControlReply(0, True, {"running_requests": 1, "waiting_requests": 0})
        assert command == "flush_cache", command
        if self.flush_error is not None:
            return ControlReply(0, False, error=self.flush_error)
        return ControlReply(0, True, {"freed_pages": 3})

    def submit(self, params: SamplingParams, **prompt: Any) -> FakeStream:
        uid = len(self.submitted)
        self.submitted.append(prompt)
        if REFUSED in json.dumps(prompt):
            replies = [UserReply(uid=uid, finished=True, finish_reason="error",
                                 error="the prompt is too long", prompt_tokens=5)]
        else:
            n = min(params.max_tokens or len(WORDS), len(WORDS))
            reason = "length" if n < len(WORDS) else "stop"
            replies = [UserReply(uid=uid, token=token, text=text, prompt_tokens=5,
                                 cached_tokens=2, finished=i == n - 1,
                                 finish_reason=reason if i == n - 1 else None)
                       for i, (token, text) in enumerate(WORDS[:n])]
        self.streams.append(FakeStream(uid, replies))
        return self.streams[-1]


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[Any]:
        """The `data:` payloads of a server-sent event stream."""
        assert self.headers["content-type"].startswith("text/event-stream")
        datas = [chunk.removeprefix(b"data: ") for chunk in self.body.split(b"\n\n") if chunk]
        return [d.decode() if d == b"[DONE]" else json.loads(d) for d in datas]


async def call(app: FastAPI, method: str, path: str, body: Any = None) -> Reply:
    """One HTTP request through the app's ASGI interface, from a loopback client."""
    raw = b"" if body is None else json.dumps(body).encode()
    headers = [(b"host", b"127.0.0.1:1919"), (b"content-length", str(len(raw)).encode())]
    if body is not None:
        headers.append((b"content-type", b"application/json"))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": headers,
             "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 1919)}
    answered, body_sent = asyncio.Event(), False
    reply = Reply(0, {}, b"")

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": raw, "more_body": False}
        await answered.wait()  # the client stays until the whole answer has arrived
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            reply.status = message["status"]
            reply.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            reply.body += message.get("body", b"")
            if not message.get("more_body"):
                answered.set()

    await app(scope, receive, send)
    return reply


def make_deps(client: FakeClient, **settings: Any) -> ServerDeps:
    args = ServerArgs(model_path="/models/tiny", model_name="tiny", log_interval=0, **settings)
    deps = ServerDeps.build(client, args)  # type: ignore[arg-type]  # a fake FrontendClient
    deps.limits = RequestLimits(vocab_size=100, max_seq_len=64)  # what startup would learn
    return deps


def with_router(build: Callable[[ServerDeps], APIRouter], client: FakeClient,
                **settings: Any) -> FastAPI:
    """A bare app holding one router: no guard, no startup."""
    app = FastAPI()
    add_error_handlers(app)
    app.include_router(build(make_deps(client, **settings)))
    return app


def run(coro):
    return asyncio.run(coro)


CHAT = {"messages": [{"role": "user", "content": "hi"}]}


# ---- operations ---------------------------------------------------------------------------------


def test_ops_router_reports_health_info_and_flushes():
    client = FakeClient()
    app = with_router(ops_router, client)

    async def go():
        health = await call(app, "GET", "/health")
        assert health.status == 200
        assert health.json()["status"] == "ok" and health.json()["running_requests"] == 1
        assert (await call(app, "GET", "/version")).json().keys() == {"version"}
        info = (await call(app, "GET", "/get_model_info")).json()
        assert (info["served_model_name"], info["max_context_length"], info["vocab_size"]) == \
            ("tiny", 64, 100)
        server = (await call(app, "GET", "/get_server_info")).json()
        assert server["max_context_length"] == 64 and server["scheduler"]["running_requests"] == 1
        metrics = await call(app, "GET", "/metrics")
        assert metrics.status == 200 and metrics.headers["content-type"].startswith("text/plain")
        flush = await call(app, "POST", "/flush_cache")
        assert (flush.status, flush.json()) == (200, {"status": "ok", "freed_pages": 3})
        # the other routers' endpoints are not in this one
        missing = await call(app, "GET", "/v1/models")
        assert missing.status == 404 and missing.json()["error"]["code"] == "not_found"

    run(go())
    assert client.submitted == []  # no endpoint here runs the model


def test_ops_router_flush_refused_is_409_in_openai_shape():
    app = with_router(ops_router, FakeClient(flush_error="requests are running"))
    reply = run(call(app, "POST", "/flush_cache"))
    assert reply.status == 409
    assert reply.json() == {"error": {"message": "requests are running",
                                      "type": "invalid_request_error", "param": None,
                                      "code": None}}


# ---- OpenAI-compatible --------------------------------------------------------------------------


def test_openai_router_answers_chat_and_completions():
    client = FakeClient()
    app = with_router(openai_router, client)

    async def go():
        models = (await call(app, "GET", "/v1/models")).json()
        assert [(m["id"], m["max_model_len"]) for m in models["data"]] == [("tiny", 64)]
        chat = await call(app, "POST", "/v1/chat/completions", {**CHAT, "model": "tiny"})
        assert chat.status == 200
        assert chat.json()["choices"][0]["message"] == {"role": "assistant",
                                                        "content": "Hello there friend"}
        assert chat.json()["usage"]["completion_tokens"] == 3
        # completions default to 16 tokens; two of them here, so the answer is cut
        text = await call(app, "POST", "/v1/completions", {"prompt": [1, 2], "max_tokens": 2})
        assert [(c["text"], c["finish_reason"]) for c in text.json()["choices"]] == \
            [("Hello there", "length")]

    run(go())
    assert client.submitted == [{"messages": CHAT["messages"]}, {"input_ids": [1, 2]}]
    assert all(stream.closed for stream in client.streams)


def test_openai_router_streams_chat_as_sse():
    app = with_router(openai_router, FakeClient())
    events = run(call(app, "POST", "/v1/chat/completions", {**CHAT, "stream": True})).events()
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(e["choices"][0]["delta"].get("content", "") for e in events[1:-1]) == \
        "Hello there friend"
    assert events[-2]["choices"][0]["finish_reason"] == "stop" and events[-1] == "[DONE]"


def test_openai_router_errors_before_the_stream_starts():
    app = with_router(openai_router, FakeClient(), served_model_name="public")

    async def go():
        wrong = await call(app, "POST", "/v1/chat/completions", {**CHAT, "model": "tiny"})
        assert wrong.status == 404 and wrong.json()["error"]["code"] == "model_not_found"
        # a refused prompt is a 400 with a JSON body, even when a stream was asked for
        refused = await call(app, "POST", "/v1/completions", {"prompt": REFUSED, "stream": True})
        assert refused.status == 400 and refused.headers["content-type"] == "application/json"
        assert refused.json()["error"]["message"] == "the prompt is too long"

    run(go())


# ---- SGLang-native ------------------------------------------------------------------------------


def test_native_router_generates_one_n_and_a_batch():
    client = FakeClient()
    app = with_router(native_router, client)

    async def go():
        one = (await call(app, "POST", "/generate", {"text": "hi"})).json()
        assert (one["text"], one["output_ids"]) == ("Hello there friend", [11, 12, 13])
        assert one["meta_info"]["finish_reason"] == {"type": "stop"}
        two = (await call(app, "POST", "/generate",
                          {"text": "hi", "sampling_params": {"n": 2, "max_new_tokens": 1}})).json()
        assert [a["meta_info"]["finish_reason"] for a in two] == [{"type": "length",
                                                                   "length": 1}] * 2
        assert two[0]["meta_info"]["id"].endswith("-0") and two[1]["meta_info"]["id"].endswith("-1")
        batch = (await call(app, "POST", "/generate", {"input_ids": [[1], [2, 3]]})).json()
        assert [a["output_ids"] for a in batch] == [[11, 12, 13]] * 2
        refused = await call(app, "POST", "/generate", {"text": ["hi", REFUSED]})
        assert refused.status == 400

    run(go())
    assert all(stream.closed for stream in client.streams)  # the refusal's sibling too


def test_native_router_streams_the_answer_so_far():
    app = with_router(native_router, FakeClient())
    events = run(call(app, "POST", "/generate", {"text": "hi", "stream": True})).events()
    assert [e["text"] for e in events[:-1]] == ["Hello", "Hello there", "Hello there friend"]
    assert events[-1] == "[DONE]"


# ---- the assembled app --------------------------------------------------------------------------


def test_create_app_serves_every_router_behind_its_checks_and_startup():
    client = FakeClient()
    app = create_app(client, ServerArgs(model_path="/models/tiny", model_name="tiny",
                                        log_interval=0))  # type: ignore[arg-type]

    async def go():
        lifespan, events = asyncio.Queue(), asyncio.Queue()
        task = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"},
                                          "state": {}}, lifespan.get, events.put))
        await lifespan.put({"type": "lifespan.startup"})
        assert (await events.get())["type"] == "lifespan.startup.complete"
        assert client.started
        # limits come from the engine at startup, not from the test
        assert (await call(app, "GET", "/v1/models")).json()["data"][0]["max_model_len"] == 64
        assert (await call(app, "POST", "/generate", {"text": "hi"})).status == 200
        assert (await call(app, "GET", "/health")).status == 200
        wrong = await call(app, "GET", "/generate")
        assert (wrong.status, wrong.headers["allow"]) == (405, "POST")
        assert wrong.json()["error"]["code"] == "method_not_allowed"
        no_json = await call(app, "POST", "/flush_cache", None)  # no body needed
        assert no_json.status == 200
        paths = list((await call(app, "GET", "/openapi.json")).json()["paths"])
        await lifespan.put({"type": "lifespan.shutdown"})
        assert (await events.get())["type"] == "lifespan.shutdown.complete"
        await task
        return paths

    paths = run(go())
    assert client.closed
    # >>> ch27
    for path in ("/model_info", "/server_info", "/get_load"):  # what sglang-router reads
        paths.remove(path)
    # <<< ch27
    assert paths == ["/health", "/metrics", "/version", "/get_model_info", "/get_server_info",
                     "/flush_cache", "/v1/models", "/v1/chat/completions", "/v1/completions",
                     "/generate"]
