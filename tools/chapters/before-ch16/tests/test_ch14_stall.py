"""Chapter 14: requests that try to stall the server for everyone (issue 28).

Each attack is sent while a thread polls /health: the attack gets a 400 (or its answer), and
/health keeps answering 200 meanwhile; the slowest /health is printed (run with -s to see it).
- D: many or long stop strings, on every endpoint that takes them, and with n > 1;
- E: prompts longer than the context as token ids, chats of too many messages, on every
  endpoint: refused by count with a clear 400 before any heavy work;
- /health while the engine cannot answer (a process stopped with SIGSTOP, as a long step would
  keep it): still 200, with the age of the numbers; the 503 rule on a fake clock;
- J: request bodies that never finish arriving are cut (408), and bodies being received cannot
  hold more than their budget (503);
- POST /flush_cache without a body, as `curl -X POST` sends it.
One server on SmolLM2 serves the module: a 1 MiB body limit and a 3 s body timeout keep the
hostile bodies small and the waits short.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import signal
import socket
import threading
import time
from contextlib import contextmanager

import psutil
import pytest
from conftest import RunningServer

from minisgl.server.health import SchedulerStatus
from minisgl.server.protocol import MAX_MESSAGES, MAX_STOP_CHARS, MAX_STOPS

MAX_BODY = 1 << 20
BODY_TIMEOUT_S = 3
CONTEXT = 1024
HEALTH_TIMEOUT_S = 20  # generous: the assertion is that /health answers, not how fast


@pytest.fixture(scope="module")
def server(smollm2_dir):
    srv = RunningServer(["--model", str(smollm2_dir), "--num-pages", "4096", "--max-seq-len",
                         str(CONTEXT), "--max-body-bytes", str(MAX_BODY), "--body-timeout",
                         str(BODY_TIMEOUT_S)])
    yield srv
    srv.stop()


def post(server, path: str, body: dict | bytes, timeout: float = 300) -> tuple[int, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


class HealthPoller:
    """Polls /health from a thread until stopped; every status and the slowest answer."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server
        self.statuses: list[int] = []
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):  # a client's pace, not a flood
            conn = http.client.HTTPConnection("127.0.0.1", self.server.port,
                                              timeout=HEALTH_TIMEOUT_S)
            start = time.monotonic()
            try:
                conn.request("GET", "/health")
                resp = conn.getresponse()
                resp.read()
                self.statuses.append(resp.status)
            except OSError as e:  # a timeout: /health did not answer
                self.statuses.append(type(e).__name__)  # type: ignore[arg-type]
            finally:
                conn.close()
            self.latencies.append(time.monotonic() - start)

    def __enter__(self) -> HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        # at least one /health answered while the attack ran (or right after it)
        deadline = time.monotonic() + 2 * HEALTH_TIMEOUT_S
        while not self.statuses and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(2 * HEALTH_TIMEOUT_S)

    def check(self, name: str) -> None:
        assert self.statuses and set(self.statuses) == {200}, (name, self.statuses)
        print(f"\n{name}: /health answered {len(self.statuses)} times, all 200, slowest "
              f"{1000 * max(self.latencies):.1f} ms")


def refused(server, name: str, path: str, body: dict | bytes, param: str, words: str,
            code: str | None = None) -> None:
    """The request gets a 400 naming `param` with `words` in its message, and /health keeps
    answering 200 while it is handled."""
    with HealthPoller(server) as health:
        status, got = post(server, path, body)
    assert status == 400, (name, status, got)
    assert got["error"]["param"] == param, (name, got)
    assert words in got["error"]["message"], (name, got)
    if code is not None:
        assert got["error"]["code"] == code, (name, got)
    health.check(name)


# ---- D: stop strings ---------------------------------------------------------------------------

CHAT = {"messages": [{"role": "user", "content": "Count from one to ten."}], "max_tokens": 64}


def stop_words(rng: random.Random, count: int, length: int) -> list[str]:
    return ["".join(rng.choice("qxzjv") for _ in range(length)) for _ in range(count)]


def test_many_stop_strings_are_refused_on_every_endpoint(server):
    rng = random.Random()
    many = stop_words(rng, 100_000, 6)  # the reported attack: 100k stop strings, under 1 MiB
    refused(server, "chat, 100k stops", "/v1/chat/completions", {**CHAT, "stop": many}, "stop",
            f"at most {MAX_STOPS}")
    refused(server, "completion, 17 stops", "/v1/completions",
            {"prompt": "Hi", "max_tokens": 8, "stop": stop_words(rng, MAX_STOPS + 1, 3)},
            "stop", f"at most {MAX_STOPS}")
    refused(server, "generate, 50k stops", "/generate",
            {"text": "Hi", "sampling_params": {"stop": many[:50_000]}},
            "sampling_params.stop", f"at most {MAX_STOPS}")


def test_long_stop_strings_are_refused(server):
    rng = random.Random()
    refused(server, "chat, one stop of 300k characters", "/v1/chat/completions",
            {**CHAT, "stop": "q" * 300_000}, "stop", f"at most {MAX_STOP_CHARS}")
    refused(server, "generate, a stop one character too long", "/generate",
            {"text": "Hi", "sampling_params": {
                "stop": stop_words(rng, 3, 5) + ["z" * (MAX_STOP_CHARS + 1)]}},
            "sampling_params.stop", f"at most {MAX_STOP_CHARS}")




# ---- E: prompts refused by count ---------------------------------------------------------------


def test_token_ids_longer_than_the_context_are_refused_by_count(server):
    rng = random.Random()
    huge = [rng.randrange(10) for _ in range(500_000)]  # one digit each: a 1 MB body
    refused(server, "completion, 500k ids", "/v1/completions", {"prompt": huge}, "prompt",
            "cannot fit in the context", "context_length_exceeded")
    refused(server, "generate, 400k ids", "/generate", {"input_ids": huge[:400_000]},
            "input_ids", "cannot fit in the context", "context_length_exceeded")
    # exactly the context: not even one new token fits; an id far outside the vocabulary at
    # the end is not looked at (the count is checked first)
    refused(server, "completion, context ids", "/v1/completions",
            {"prompt": huge[: CONTEXT - 1] + [1 << 40]}, "prompt", "cannot fit in the context",
            "context_length_exceeded")


def test_chats_of_too_many_messages_are_refused_by_count(server):
    empty = {"role": "user", "content": ""}
    refused(server, "chat, 30k empty messages", "/v1/chat/completions",
            {"messages": [empty] * 30_000}, "messages", f"{MAX_MESSAGES} allowed")
    refused(server, "chat, one message too many", "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": ""}]},
                          {"role": "assistant", "content": ""}] * (MAX_MESSAGES // 2)
             + [empty], "max_tokens": 2, "stream": True}, "messages", f"{MAX_MESSAGES} allowed")


# ---- /health while the engine is busy ----------------------------------------------------------


@contextmanager
def stopped(server, title: str):
    """The server's process `minisgl::<title>` stopped (SIGSTOP) for the block: it answers
    nothing, as the scheduler answers nothing while it runs one long step."""
    launcher = psutil.Process(server.proc.pid)
    (proc,) = [p for p in launcher.children(recursive=True)
               if p.cmdline() and p.cmdline()[0].strip() == f"minisgl::{title}"]
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def get_health(server) -> tuple[int, dict, float]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=HEALTH_TIMEOUT_S)
    start = time.monotonic()
    try:
        conn.request("GET", "/health")
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), time.monotonic() - start
    finally:
        conn.close()


def wait_fresh(server, timeout: float = 60) -> dict:
    """Poll /health until the scheduler answers again (numbers less than a second old)."""
    deadline = time.monotonic() + timeout
    while True:
        status, body, _ = get_health(server)
        if status == 200 and body["stats_age_s"] < 1:
            return body
        assert time.monotonic() < deadline, body
        time.sleep(0.1)


@pytest.mark.parametrize("title", ["scheduler", "tokenizer-0", "detokenizer"])
def test_health_stays_200_while_a_process_cannot_answer(server, title):
    """Questions to the scheduler travel tokenizer -> scheduler -> detokenizer: with any of the
    three silent, /health still answers 200 from the last numbers, and says how old they are;
    a request in flight meanwhile completes once the process runs again."""
    wait_fresh(server)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    conn.request("POST", "/v1/completions", body=json.dumps({
        "prompt": "Once upon a time", "max_tokens": 24, "ignore_eos": True, "stream": True}),
        headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.readline().startswith(b"data: ")  # it runs
    latencies = []
    with stopped(server, title):
        for _ in range(4):
            status, body, took = get_health(server)
            assert status == 200, body
            assert body["status"] == "ok" and body["total_pages"] == 4096
            latencies.append(took)
        assert body["stats_age_s"] > 0  # old numbers, said so
    events = resp.read().split(b"\n\n")
    conn.close()
    assert events[-2] == b"data: [DONE]"
    assert json.loads(events[-3][len(b"data: "):])["choices"][0]["finish_reason"] == "length"
    assert wait_fresh(server)["running_requests"] == 0
    print(f"\n{title} stopped: /health 200 in at most {1000 * max(latencies):.1f} ms")


def test_the_health_rule_on_a_fake_clock():
    """200 with the last numbers while the scheduler is slow; 503 once it has been silent for
    more than stale_s, when a worker has exited, or while shutting down; fresh numbers again
    as soon as it answers."""

    async def scenario() -> None:
        now = [100.0]
        answer: asyncio.Future | None = None
        stats = {"free_pages": 7}
        dead: list[str] = []
        closing: list[str] = []

        async def ask(timeout: float) -> dict[str, int]:
            if answer is None:
                return dict(stats)
            return await asyncio.wait_for(asyncio.shield(answer), timeout)

        status = SchedulerStatus(ask, lambda: dead[0] if dead else None,
                                 lambda: closing[0] if closing else None, stale_s=30,
                                 fresh_wait_s=0.01, clock=lambda: now[0])
        first = await status.health()
        assert (first.status, first.body) == (200, {"status": "ok", "free_pages": 7,
                                                    "stats_age_s": 0.0})
        answer = asyncio.get_running_loop().create_future()  # the scheduler is busy now
        now[0] += 12
        busy = await status.health()
        assert (busy.status, busy.body["free_pages"], busy.body["stats_age_s"]) == (200, 7, 12)
        now[0] += 29  # asked 29 s ago: busy, not dead
        assert (await status.health()).status == 200
        now[0] += 2
        silent = await status.health()
        assert silent.status == 503 and "not answered for 31 s" in silent.body["reason"]
        stats["free_pages"] = 3
        answer.set_result(dict(stats))  # the step ends: the question is answered
        while status.waiting_since is not None:  # the answer reaches the status
            await asyncio.sleep(0)
        back = await status.health()
        assert (back.status, back.body["free_pages"], back.body["stats_age_s"]) == (200, 3, 0)
        answer = None
        dead.append("detokenizer")
        gone = await status.health()
        assert gone.status == 503 and "detokenizer" in gone.body["reason"]
        dead.clear()
        closing.append("the server is shutting down")
        assert (await status.health()).body["reason"] == "the server is shutting down"

    asyncio.run(scenario())


# ---- J: request bodies that never finish -------------------------------------------------------


def open_body(server, declared: int | None, first: bytes) -> socket.socket:
    """A POST whose headers promise `declared` bytes (None: chunked) and whose body so far is
    `first`."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    length = "Transfer-Encoding: chunked" if declared is None else f"Content-Length: {declared}"
    try:
        sock.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
                     f"Content-Type: application/json\r\n{length}\r\n\r\n".encode() + first)
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused while sending: its answer is read next
    return sock


def answer_of(sock: socket.socket, timeout: float = 30) -> int:
    """The status the server answers with; it must close the connection after it."""
    sock.settimeout(timeout)
    reply = b""
    try:
        while chunk := sock.recv(1 << 16):
            reply += chunk
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.1 "), reply[:200]
    return int(reply.split()[1])


def test_a_body_that_stops_arriving_is_cut(server):
    sock = open_body(server, 1000, b'{"prompt": "Once upon')
    with HealthPoller(server) as health:
        assert answer_of(sock) == 408
    health.check("a body that stopped after 21 of 1000 bytes")


def test_a_body_that_trickles_is_cut_at_the_deadline(server):
    """A byte every 0.2 s keeps the connection busy but never finishes: the deadline counts
    from the headers, not from the last byte."""
    sock = open_body(server, None, b'6\r\n{"prom\r\n')
    done = threading.Event()

    def trickle() -> None:
        try:
            while not done.wait(0.2):
                sock.sendall(b"1\r\n \r\n")
        except OSError:  # the server closed the connection: the attack is over
            pass

    sender = threading.Thread(target=trickle, daemon=True)
    sender.start()
    try:
        assert answer_of(sock) == 408
    finally:
        done.set()
        sender.join(10)


def test_slow_bodies_cannot_hold_more_than_their_budget(server):
    """Six bodies of 900 KiB each (of a 1 MiB Content-Length) stall: the bodies in flight may
    hold 4 MiB together (4 x --max-body-bytes), so four are held until the body timeout (408)
    and two are refused at once (503). The server keeps serving meanwhile."""
    api_server = psutil.Process(server.proc.pid)
    before = api_server.memory_info().rss
    part = b'{"prompt": "' + b"a" * (900 * 1024)
    socks = [open_body(server, MAX_BODY, part) for _ in range(6)]
    with HealthPoller(server) as health:
        status, got = post(server, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        assert status == 200, got  # a small request still gets in
        statuses = sorted(answer_of(sock) for sock in socks)
    after = api_server.memory_info().rss
    assert statuses == [408, 408, 408, 408, 503, 503]
    health.check("six stalled bodies of 900 KiB")
    print(f"api server RSS {before / 2**20:.0f} MiB -> {after / 2**20:.0f} MiB")


# ---- POST /flush_cache without a body (issue 28, item 6) ---------------------------------------


def raw_post(server, path: str, headers: dict[str, str]) -> int:
    """A POST with exactly these headers and no body."""
    head = {"Host": f"127.0.0.1:{server.port}", "Connection": "close", **headers}
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
    sock.sendall((f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in head.items())
                  + "\r\n").encode())
    return answer_of(sock)


def test_flush_cache_without_a_body(server):
    wait_fresh(server)
    assert raw_post(server, "/flush_cache", {}) == 200  # curl -X POST: no length, no type
    assert raw_post(server, "/flush_cache", {"Content-Length": "0"}) == 200  # requests.post
    # what a web page can send without asking first stays refused
    assert raw_post(server, "/flush_cache", {"Origin": "http://evil.example"}) == 415
    assert raw_post(server, "/flush_cache", {"Content-Type": "text/plain",
                                             "Content-Length": "0"}) == 415
    # an operation that needs a body still needs it to be JSON
    assert raw_post(server, "/generate", {}) == 415
    assert raw_post(server, "/v1/completions", {"Content-Length": "0"}) == 415


def test_a_batch_of_prompts_is_refused_with_a_clear_message(server):
    for body, param in [({"text": ["Hi", "Hello"]}, "text"),
                        ({"input_ids": [[1, 2], [3]]}, "input_ids")]:
        status, got = post(server, "/generate", body)
        assert status == 400 and got["error"]["param"] == param, got
        assert "batched prompts" in got["error"]["message"], got
