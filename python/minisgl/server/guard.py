"""Checks on every HTTP request before any endpoint sees it (an ASGI middleware).

- Host: a server bound to a loopback address answers only requests addressed to it by that
  address or `localhost`, with its port. A web page can otherwise reach it through DNS rebinding
  (a name of the attacker's that first points at the attacker's server, then at 127.0.0.1): the
  browser then sends that name in the Host header, and is refused with 421.
- API key: with --api-key, every request but GET /health must carry `Authorization: Bearer
  <key>` (as the OpenAI client sends it), else 401. The comparison takes the same time however
  much of the key is right (hmac.compare_digest), so timing tells an attacker nothing. /health
  stays open for load balancers and orchestrators, and tells nothing but page counts.
- Content-Type: a POST must say `application/json`. A browser sends a cross-site POST without
  asking the server first (no CORS preflight) only with text/plain, a form type or no body type,
  so requiring JSON keeps any web page from driving a loopback server. 415 otherwise. The one
  exception is an operation that takes no body (`BODYLESS_PATHS`, /flush_cache) sent without one
  and without Content-Type, as `curl -X POST` sends it, and not by a browser: a browser sends
  an Origin header with every POST, and such a POST still gets 415.
- Body size: at most `max_body_bytes`. A Content-Length above it is refused with 413 before a
  byte of the body is read; a chunked body is counted while it arrives and refused as soon as it
  passes the limit. The endpoints then read the body from memory. (After an early answer, what
  the client still sends is discarded for a moment, see `_drain`.)
- Body time and memory: the whole body must arrive within `body_timeout_s` of the request's
  headers, else 408 and the connection is closed. A client that sends a few bytes now and then
  would otherwise hold its connection and the part it sent forever, and forty such clients held
  200 MB. And the bodies being received together may hold at most `body_budget_bytes` beyond
  the first 64 KiB of each (`SMALL_BODY_BYTES`): a body that would pass it gets 503, so slow
  clients cannot grow the server's memory without bound while small requests still get in.
- Anything an endpoint raises that is not an ApiError becomes a 500 in OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from minisgl.utils import init_logger

from .protocol import ApiError

logger = init_logger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_BODY_BYTES = 8 << 20  # 8 MiB: a full 40k-token context as JSON, with room to spare
DEFAULT_BODY_TIMEOUT_S = 30.0  # 8 MiB in 30 s: a client slower than 280 kB/s is refused
BODY_BUDGET_BODIES = 4  # by default the bodies in flight may hold 4 x max_body_bytes together
SMALL_BODY_BYTES = 64 << 10  # what uvicorn buffers per connection anyway: not counted
OPEN_PATHS = frozenset({"/health"})  # answered without the API key
BODYLESS_PATHS = frozenset({"/flush_cache"})  # POSTs that take no body


def loopback_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host header values a server bound to host:port accepts; None when it is not bound
    to a loopback address (then it serves the network on purpose and any name may be used)."""
    if host != "localhost":
        try:
            if not ipaddress.ip_address(host).is_loopback:
                return None
        except ValueError:  # a host name other than localhost
            return None
    names = {"localhost", f"[{host}]" if ":" in host else host}
    allowed = {f"{name}:{port}" for name in names}
    if port == 80:  # a browser leaves out the port when it is the scheme's default
        allowed |= names
    return frozenset(allowed)


def is_json(content_type: str) -> bool:
    """`application/json`, in any case, with or without parameters such as a charset."""
    return content_type.split(";", 1)[0].strip().lower() == "application/json"


class RequestGuard:
    def __init__(self, app: App, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 allowed_hosts: frozenset[str] | None = None, api_key: str | None = None,
                 body_timeout_s: float = DEFAULT_BODY_TIMEOUT_S,
                 body_budget_bytes: int | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.allowed_hosts = allowed_hosts
        self.body_timeout_s = body_timeout_s
        self.body_budget_bytes = body_budget_bytes if body_budget_bytes is not None else \
            BODY_BUDGET_BODIES * max_body_bytes
        self.receiving_bytes = 0  # counted bytes of the bodies being received now
        # Compared as bytes, as the header arrives (latin-1, what HTTP headers are made of).
        self.expected_auth = None if api_key is None else f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan events
            await self.app(scope, receive, send)
            return
        started = False

        async def send_tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            error = self._check_headers(scope)
            body = None
            if error is None:
                body, error = await self._read_body(scope, receive)
            if error is not None:
                # The answer goes out at once; the response ends only after the drain, because
                # once it has ended the server reads nothing more from the connection.
                await send_error(send, error, close=True, more_body=True)
                await _drain(receive, self.max_body_bytes)
                await send({"type": "http.response.body", "body": b""})
                return
            await self.app(scope, _replay(body, receive), send_tracked)
        except Exception:  # a bug: the client still gets JSON, the log gets the traceback
            logger.exception("error while serving %s %s", scope["method"], scope["path"])
            if not started:
                await send_error(send, ApiError(500, "internal server error"), close=True)

    def _check_headers(self, scope: Scope) -> ApiError | None:
        headers = _headers(scope)
        host = headers.get("host")
        # No Host header at all comes from an HTTP/1.0 tool, never from a browser.
        if self.allowed_hosts is not None and host is not None \
                and host.lower() not in self.allowed_hosts:
            return ApiError(421, f"this server answers only requests to "
                                 f"{', '.join(sorted(self.allowed_hosts))}; got Host {host!r}",
                            code="invalid_host")
        if self.expected_auth is not None and scope["path"] not in OPEN_PATHS:
            got = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(got, self.expected_auth):
                return ApiError(401, "a valid API key is required: send 'Authorization: Bearer "
                                     "<key>' with the key the server was started with "
                                     "(--api-key)", code="invalid_api_key")
        if scope["method"] == "POST" and not is_json(headers.get("content-type", "")) \
                and not _bodyless(scope["path"], headers):
            return ApiError(415, "the body must be JSON, sent with 'Content-Type: "
                                 "application/json'", code="unsupported_media_type")
        length = headers.get("content-length")
        if length is not None:
            if not length.isdigit():
                return ApiError(400, f"bad Content-Length {length!r}")
            if int(length) > self.max_body_bytes:
                return self._too_large()
        return None

    async def _read_body(self, scope: Scope, receive: Receive) -> tuple[bytes | None,
                                                                         ApiError | None]:
        """The whole body (None for a request that is not a POST), or the error to answer."""
        if scope["method"] != "POST":
            return None, None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout_s
        chunks, size, counted, more = [], 0, 0, True
        try:
            while more:
                try:
                    message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    return None, ApiError(408, f"the request body did not arrive within "
                                               f"{self.body_timeout_s:g} s (--body-timeout)",
                                          code="request_timeout")
                if message["type"] == "http.disconnect":
                    return None, ApiError(499, "the client closed the connection")
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.max_body_bytes:
                    return None, self._too_large()
                more_counted = max(0, size - SMALL_BODY_BYTES) - counted
                if self.receiving_bytes + more_counted > self.body_budget_bytes:
                    return None, ApiError(503, "the server is receiving too many large request "
                                               "bodies at once; retry in a moment",
                                          code="server_busy")
                self.receiving_bytes += more_counted
                counted += more_counted
                chunks.append(chunk)
                more = message.get("more_body", False)
            return b"".join(chunks), None
        finally:
            self.receiving_bytes -= counted  # the endpoint owns the body now, or nobody does

    def _too_large(self) -> ApiError:
        return ApiError(413, f"the body is over {self.max_body_bytes} bytes (--max-body-bytes)",
                        code="request_too_large")


async def _drain(receive: Receive, max_bytes: int, max_seconds: float = 1.0) -> None:
    """Discard what the client is still sending, for a moment, after an early error answer
    (a request without a body has nothing to discard: its first message ends it).

    Closing a connection with unread bytes makes the kernel reset it, and a client still
    sending its body then loses the answer it was sent (it sees "connection reset" instead of
    413). Bytes read here are dropped at once; the bounds keep a client that never stops from
    holding the connection."""
    loop = asyncio.get_running_loop()
    deadline, drained = loop.time() + max_seconds, 0
    while drained <= max_bytes:
        try:
            message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            return
        drained += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


def _bodyless(path: str, headers: dict[str, str]) -> bool:
    """A POST to an operation that takes no body, sent as `curl -X POST` sends it: no body, no
    Content-Type, and no Origin (which every browser sends with a POST)."""
    return path in BODYLESS_PATHS and "content-type" not in headers \
        and "origin" not in headers and "transfer-encoding" not in headers \
        and headers.get("content-length", "0") == "0"


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}


def _replay(body: bytes | None, receive: Receive) -> Receive:
    """`receive` for the endpoint: the body already read, then the client's later events (a
    disconnect, which a streaming endpoint watches for)."""
    if body is None:
        return receive
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


async def send_error(send: Send, error: ApiError, close: bool = False,
                     more_body: bool = False) -> None:
    """Answer with `error` in OpenAI's shape. close=True when the body was not read to its
    end: the connection cannot carry another request after it. more_body=True leaves the
    response open (all its bytes are sent; an empty last message ends it)."""
    payload = json.dumps(error.body).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(payload)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload, "more_body": more_body})
