"""Chapter 14: the OpenAI-compatible server, driven by the official `openai` client and raw HTTP.

One server on SmolLM2 serves every test (fixture `smollm2_server` in conftest.py). Greedy answers
are compared with `LLM.generate` on the same token ids in this process.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import random
import socket
import threading
import time
from dataclasses import dataclass, field

import openai
import pytest
from conftest import CHAT_PROMPTS

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.server.protocol import MAX_CHARS_PER_TOKEN


@pytest.fixture(scope="module")
def server(smollm2_server):
    return smollm2_server


@pytest.fixture(scope="module")
def llm(smollm2_dir):
    ref = LLM(str(smollm2_dir), num_pages=4096)
    yield ref
    ref.shutdown()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)


JSON = {"Content-Type": "application/json"}


def reference(llm: LLM, ids: list[int], max_tokens: int) -> dict:
    return llm.generate([ids], SamplingParams(max_tokens=max_tokens), use_tqdm=False)[0]


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def sse_events(server, path: str, body: dict) -> tuple[list[object], list[bytes]]:
    """POST a streaming request; the parsed `data:` payloads and the raw lines."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", path, body=json.dumps(body), headers=JSON)
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.getheader("content-type").startswith("text/event-stream")
    raw = resp.read()
    conn.close()
    events = [line[len(b"data: "):] for line in raw.split(b"\n\n") if line]
    return [e.decode() if e == b"[DONE]" else json.loads(e) for e in events], raw.split(b"\n\n")


def wait_idle(server, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        stats = server.health()
        if stats["running_requests"] == 0 and stats["waiting_requests"] == 0 \
                and stats["request_pages"] == 0:
            return stats
        assert time.monotonic() < deadline, f"requests still hold pages: {stats}"
        time.sleep(0.2)


# ---- correct answers ---------------------------------------------------------------------------


def test_models_lists_the_served_model(client, server):
    assert [m.id for m in client.models.list().data] == [server.model_name]


def test_sync_chat_equals_llm_generate(client, server, llm):
    for question in random.sample(CHAT_PROMPTS, 3):
        ids = llm.tokenizer.apply_chat_template(chat(question))
        want = reference(llm, ids, 32)
        got = client.chat.completions.create(model=server.model_name, messages=chat(question),
                                             temperature=0, max_tokens=32)
        assert got.choices[0].message.content == want["text"]
        assert got.choices[0].message.role == "assistant"
        assert got.choices[0].finish_reason == want["finish_reason"]
        assert got.usage.prompt_tokens == len(ids)
        assert got.usage.completion_tokens == len(want["token_ids"])
        assert got.usage.total_tokens == len(ids) + len(want["token_ids"])


def test_text_completion_equals_llm_generate(client, server, llm):
    prompt = "The three primary colors are"
    want = llm.generate([prompt], SamplingParams(max_tokens=20), use_tqdm=False)[0]
    got = client.completions.create(model=server.model_name, prompt=prompt, temperature=0,
                                    max_tokens=20)
    assert got.choices[0].text == want["text"]
    assert got.usage.prompt_tokens == len(llm.tokenizer.encode(prompt))
    ids_prompt = client.completions.create(model=server.model_name,
                                           prompt=llm.tokenizer.encode(prompt), temperature=0,
                                           max_tokens=20)
    assert ids_prompt.choices[0].text == want["text"]


def test_streaming_chat_concatenates_to_the_non_streamed_answer(client, server, llm):
    question = "Name the planets of the solar system in order."
    ids = llm.tokenizer.apply_chat_template(chat(question))
    want = reference(llm, ids, 40)
    stream = client.chat.completions.create(model=server.model_name, messages=chat(question),
                                            temperature=0, max_tokens=40, stream=True,
                                            stream_options={"include_usage": True})
    pieces, reasons, usage = [], [], None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            pieces.append(choice.delta.content or "")
            reasons.append(choice.finish_reason)
    assert "".join(pieces) == want["text"]
    assert len([p for p in pieces if p]) > 3  # really streamed, not one blob
    assert reasons[-1] == want["finish_reason"] and set(reasons[:-1]) == {None}
    assert usage.prompt_tokens == len(ids) and usage.completion_tokens == len(want["token_ids"])


def test_raw_sse_ends_with_done(server):
    events, raw = sse_events(server, "/v1/completions",
                             {"prompt": "Hello", "max_tokens": 5, "stream": True})
    assert events[-1] == "[DONE]"
    assert all(line.startswith(b"data: ") for line in raw if line)
    assert all(isinstance(e, dict) for e in events[:-1])
    assert events[-2]["choices"][0]["finish_reason"] in ("stop", "length")


def test_async_client_runs_requests_concurrently(server, llm):
    questions = random.sample(CHAT_PROMPTS, 4)

    async def run() -> list[str]:
        aclient = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused",
                                     max_retries=0)
        async with aclient:
            replies = await asyncio.gather(*[aclient.chat.completions.create(
                model=server.model_name, messages=chat(q), temperature=0, max_tokens=24)
                for q in questions])
        return [r.choices[0].message.content for r in replies]

    assert all(asyncio.run(run()))  # four answers, computed in one batch
    # Batching can change float rounding, so greedy equality is checked on a request alone.
    want = reference(llm, llm.tokenizer.apply_chat_template(chat(questions[0])), 24)
    assert asyncio.run(_one_async(server, questions[0])) == want["text"]


async def _one_async(server, question: str) -> str:
    async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="unused",
                                  max_retries=0) as aclient:
        stream = await aclient.chat.completions.create(
            model=server.model_name, messages=chat(question), temperature=0, max_tokens=24,
            stream=True)
        return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])


GREEDY_16 = {"max_new_tokens": 16, "temperature": 0}


def test_generate_endpoint_returns_llm_tokens(server, llm):
    ids = llm.tokenizer.apply_chat_template(chat("What is 17 times 23?"))
    want = reference(llm, ids, 16)
    status, body = server.post("/generate", {"input_ids": ids, "sampling_params": GREEDY_16})
    assert status == 200, body
    assert body["output_ids"] == want["token_ids"] and body["text"] == want["text"]
    events, _ = sse_events(server, "/generate", {"input_ids": ids, "sampling_params": GREEDY_16,
                                                 "stream": True})
    # SGLang's stream: each event holds the whole answer so far
    assert events[-2]["output_ids"] == want["token_ids"] and events[-2]["text"] == want["text"]
    for before, after in zip(events[:-2], events[1:-1]):
        assert after["text"].startswith(before["text"])
        assert after["output_ids"][:len(before["output_ids"])] == before["output_ids"]


def test_ignore_eos_runs_to_max_tokens(client, server):
    got = client.completions.create(model=server.model_name, prompt="Hi", max_tokens=12,
                                    temperature=0, extra_body={"ignore_eos": True})
    assert got.usage.completion_tokens == 12 and got.choices[0].finish_reason == "length"


def test_sampling_parameters_reach_the_sampler(client, server):
    texts = {client.completions.create(model=server.model_name, prompt="My favourite word is",
                                       max_tokens=12, temperature=1.5, top_p=0.99,
                                       extra_body={"top_k": 50}).choices[0].text
             for _ in range(4)}
    assert len(texts) > 1  # four samples at temperature 1.5 are not all the same
    greedy_k1 = {client.completions.create(model=server.model_name, prompt="My favourite word is",
                                           max_tokens=12, temperature=1.5,
                                           extra_body={"top_k": 1}).choices[0].text
                 for _ in range(2)}
    assert len(greedy_k1) == 1  # top_k=1 is greedy whatever the temperature


def test_stop_strings_cut_the_answer(client, server, llm):
    question = "Name the planets of the solar system in order."
    full = reference(llm, llm.tokenizer.apply_chat_template(chat(question)), 40)["text"]
    words = full.split()
    stop = " " + words[len(words) // 2]
    cut = full[: full.index(stop)]
    got = client.chat.completions.create(model=server.model_name, messages=chat(question),
                                         temperature=0, max_tokens=40, stop=[stop, "@@@"])
    assert got.choices[0].message.content == cut
    assert got.choices[0].finish_reason == "stop"
    stream = client.chat.completions.create(model=server.model_name, messages=chat(question),
                                            temperature=0, max_tokens=40, stop=stop, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == cut
    wait_idle(server)  # the stopped request was aborted, not left running


# ---- load --------------------------------------------------------------------------------------


def test_32_streaming_clients_3_requests_each(server, llm):
    """32 threads, each with its own client, 3 streaming requests in a row; every stream is
    complete and self-consistent, and afterwards every KV page is free again."""
    errors: list[str] = []
    results: list[tuple[str, list[int]]] = []
    lock = threading.Lock()

    def one_client(seed: int) -> None:
        rng = random.Random(seed)
        sync = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused",
                             max_retries=0, timeout=240)
        try:
            for k in range(3):
                question = rng.choice(CHAT_PROMPTS)
                max_tokens = rng.randint(4, 16)
                if k == 1:  # /generate streams the token ids too: text must match them
                    ids = llm.tokenizer.apply_chat_template(chat(question))
                    events, _ = sse_events(server, "/generate", {
                        "input_ids": ids, "stream": True,
                        "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0}})
                    assert events[-1] == "[DONE]"
                    text, tokens = events[-2]["text"], events[-2]["output_ids"]
                    assert 1 <= len(tokens) <= max_tokens
                    with lock:
                        results.append((text, tokens))
                    continue
                stream = sync.chat.completions.create(
                    model=server.model_name, messages=chat(question), max_tokens=max_tokens,
                    temperature=0, stream=True, stream_options={"include_usage": True})
                text, usage, reason = "", None, None
                for chunk in stream:
                    usage = chunk.usage or usage
                    for choice in chunk.choices:
                        text += choice.delta.content or ""
                        reason = choice.finish_reason or reason
                assert reason in ("stop", "length") and usage is not None
                assert 1 <= usage.completion_tokens <= max_tokens
        except Exception as e:  # collected and reported by the main thread
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
        finally:
            sync.close()

    threads = [threading.Thread(target=one_client, args=(random.randrange(1 << 30),))
               for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not any(t.is_alive() for t in threads), "clients still running after 10 minutes"
    assert errors == []
    assert len(results) == 32
    for text, tokens in results:
        assert text == llm.tokenizer.decode(tokens, skip_special_tokens=True)
    wait_idle(server)
    status, stats = server.post("/flush_cache", {})
    assert status == 200, stats
    assert stats["free_pages"] == stats["total_pages"]


# ---- a client that leaves ----------------------------------------------------------------------


def test_disconnect_mid_stream_aborts_and_frees_pages(server):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request("POST", "/v1/completions", body=json.dumps(
        {"prompt": "Once upon a time", "max_tokens": 900, "ignore_eos": True, "stream": True}),
        headers=JSON)
    resp = conn.getresponse()
    assert resp.status == 200
    for _ in range(3):
        assert resp.fp.readline()  # a few events have arrived: the request is running
    assert server.health()["running_requests"] == 1
    conn.sock.shutdown(2)
    conn.close()
    stats = wait_idle(server)
    assert stats["free_pages"] + stats["cached_pages"] == stats["total_pages"]


# ---- bad input: an OpenAI-style error with a 4xx status, and the server keeps serving -----------

GOOD = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
LONG = {"messages": [{"role": "user", "content": "word " * 1500}], "max_tokens": 4}

BAD_REQUESTS = {
    "malformed JSON": (b'{"messages": [', 400, None),
    "body not an object": (b"[1, 2]", 400, None),
    "missing messages": ({"max_tokens": 4}, 400, "messages"),
    "messages not a list": ({"messages": "Hi"}, 400, "messages"),
    "message without content": ({"messages": [{"role": "user"}]}, 400, "messages.0.content"),
    "unknown role": ({"messages": [{"role": "wizard", "content": "x"}]}, 400, "messages.0.role"),
    "empty messages": ({"messages": []}, 400, "messages"),
    "max_tokens a string": ({**GOOD, "max_tokens": "4"}, 400, "max_tokens"),
    "max_tokens 0": ({**GOOD, "max_tokens": 0}, 400, "max_tokens"),
    "max_tokens negative": ({**GOOD, "max_tokens": -3}, 400, "max_tokens"),
    "temperature negative": ({**GOOD, "temperature": -0.1}, 400, "temperature"),
    "temperature a string": ({**GOOD, "temperature": "hot"}, 400, "temperature"),
    "top_p 0": ({**GOOD, "top_p": 0}, 400, "top_p"),
    "top_p above 1": ({**GOOD, "top_p": 1.01}, 400, "top_p"),
    "top_k 0": ({**GOOD, "top_k": 0}, 400, None),
    "stream not a bool": ({**GOOD, "stream": "yes"}, 400, "stream"),
    "n above 16": ({**GOOD, "n": 17}, 400, "n"),
    "prompt longer than the context": (LONG, 400, None),
    "prompt longer than the context, streaming": ({**LONG, "stream": True}, 400, None),
    "unknown model": ({**GOOD, "model": "gpt-17"}, 404, "model"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS), ids=list(BAD_REQUESTS))
def test_bad_chat_request_gets_an_openai_error(server, case):
    body, status, param = BAD_REQUESTS[case]
    got_status, got = server.post("/v1/chat/completions", body)
    assert got_status == status, got
    assert set(got) == {"error"} and isinstance(got["error"]["message"], str)
    assert got["error"]["type"] == "invalid_request_error"
    if param is not None:
        assert got["error"]["param"] == param
    ok_status, ok = server.post("/v1/chat/completions", GOOD)  # still serving
    assert ok_status == 200 and ok["choices"][0]["message"]["content"] is not None


def test_bad_completion_requests(server):
    for body, param in [({"max_tokens": 3}, "prompt"), ({"prompt": ""}, "prompt"),
                        ({"prompt": ["a", "b"]}, "prompt"), ({"prompt": [1, "x"]}, "prompt"),
                        ({"prompt": "x" * 20000, "max_tokens": 3, "stream": True}, None)]:
        status, got = server.post("/v1/completions", body)
        assert status == 400, (body, got)
        assert param is None or got["error"]["param"] == param
    status, got = server.post("/generate", {"sampling_params": {"max_new_tokens": 3}})
    assert status == 400 and "exactly one" in got["error"]["message"]


def test_openai_client_raises_typed_errors(client, server):
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model=server.model_name, messages=chat("Hi"),
                                       temperature=-1)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(model="no-such-model", messages=chat("Hi"))
    with pytest.raises(openai.BadRequestError, match="context"):
        client.chat.completions.create(model=server.model_name, messages=chat("word " * 1500),
                                       max_tokens=4)


# ---- a hostile client: no request may bring the server down (issue 11) -------------------------

INT64 = 1 << 63
MAX_BODY = 8 << 20  # the server's default --max-body-bytes


@dataclass
class Raw:
    """One HTTP request as bytes on a socket, so that anything can be sent (a wrong Host, no
    Content-Type, a chunked body, bytes that are not UTF-8)."""

    method: str = "POST"
    path: str = "/v1/completions"
    body: bytes | dict = b""
    content_type: str | None = "application/json"
    host: str | None = None  # None: the right one
    headers: dict[str, str] = field(default_factory=dict)
    chunks: int = 0  # > 0: send the body chunked, `chunks` times

    def send(self, port: int) -> tuple[int, dict[str, str], bytes]:
        body = json.dumps(self.body).encode() if isinstance(self.body, dict) else self.body
        head = {"Host": self.host or f"127.0.0.1:{port}", "Connection": "close", **self.headers}
        if self.content_type is not None:
            head["Content-Type"] = self.content_type
        if self.chunks:
            head["Transfer-Encoding"] = "chunked"
        elif "Content-Length" not in head and self.method in ("POST", "PUT"):
            head["Content-Length"] = str(len(body))
        lines = [f"{self.method} {self.path} HTTP/1.1", *[f"{k}: {v}" for k, v in head.items()]]
        with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
            try:
                sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
                if self.chunks:
                    for _ in range(self.chunks):
                        sock.sendall(f"{len(body):x}\r\n".encode() + body + b"\r\n")
                    sock.sendall(b"0\r\n\r\n")
                elif "Content-Length" not in self.headers:
                    sock.sendall(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server answered before taking the whole body, as it should
            reply = b""
            while chunk := sock.recv(1 << 16):
                reply += chunk
        head_bytes, _, payload = reply.partition(b"\r\n\r\n")
        status_line, *header_lines = head_bytes.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
        return int(status_line.split()[1]), headers, payload


def hostile_requests(vocab: int, max_prompt_chars: int, rng: random.Random) -> dict:
    """name -> (request, expected status, expected error param or None)."""
    hi = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    prompt = {"prompt": "Hi", "max_tokens": 2}
    deep = rng.randrange(300, 5000)
    return {
        # out-of-range token ids and integers
        "prompt id = vocab": (Raw(body={"prompt": [1, vocab]}), 400, "prompt"),
        "prompt id far above vocab": (Raw(body={"prompt": [vocab + rng.randrange(1, 1 << 40)]}),
                                      400, "prompt"),
        "prompt id negative": (Raw(body={"prompt": [2, -rng.randrange(1, 1 << 30)]}), 400,
                               "prompt"),
        "prompt id 2^64": (Raw(body={"prompt": [(1 << 64) + rng.randrange(99)]}), 400, "prompt"),
        "input_ids negative": (Raw(path="/generate", body={"input_ids": [-1, 5]}), 400,
                               "input_ids"),
        "input_ids 2^63": (Raw(path="/generate", body={"input_ids": [INT64]}), 400, "input_ids"),
        "input_ids = vocab": (Raw(path="/generate", body={"input_ids": [vocab]}), 400,
                              "input_ids"),
        "top_k 2^63": (Raw(body={**prompt, "top_k": INT64 + rng.randrange(99)}), 400, "top_k"),
        "top_k 2^64": (Raw(body={**prompt, "top_k": (1 << 64) + 5}), 400, "top_k"),
        "top_k vocab + 1": (Raw(body={**prompt, "top_k": vocab + 1}), 400, "top_k"),
        "top_k 0": (Raw(path="/generate", body={"text": "x", "sampling_params": {"top_k": 0}}),
                    400, "sampling_params.top_k"),
        "top_k -2": (Raw(path="/v1/chat/completions", body={**hi, "top_k": -2}), 400, "top_k"),
        "max_tokens 2^64": (Raw(body={**prompt, "max_tokens": 1 << 64}), 400, "max_tokens"),
        "max_tokens 2^63": (Raw(body={**prompt, "max_tokens": INT64}), 400, "max_tokens"),
        "max_completion_tokens 2^70": (Raw(path="/v1/chat/completions", body={
            **hi, "max_completion_tokens": 1 << 70}), 400, "max_completion_tokens"),
        "n 2^64": (Raw(path="/v1/chat/completions", body={**hi, "n": 1 << 64}), 400, "n"),
        # floats that are not finite
        "temperature 1e309": (Raw(body=b'{"prompt": "Hi", "temperature": 1e309}'), 400,
                              "temperature"),
        "temperature -1e999": (Raw(body=b'{"prompt": "Hi", "temperature": -1e999}'), 400,
                               "temperature"),
        "temperature NaN": (Raw(path="/generate", body=b'{"text": "Hi", "sampling_params": '
                                                      b'{"temperature": NaN}}'),
                            400, "sampling_params.temperature"),
        "top_p Infinity": (Raw(body=b'{"prompt": "Hi", "top_p": Infinity}'), 400, "top_p"),
        "top_p -Infinity": (Raw(path="/v1/chat/completions", body=json.dumps(hi).encode()[:-1]
                                + b', "top_p": -Infinity}'), 400, "top_p"),
        # content types a browser may send without asking first, and near misses
        "text/plain": (Raw(body=prompt, content_type="text/plain"), 415, None),
        "no content type": (Raw(body=prompt, content_type=None), 415, None),
        "form urlencoded": (Raw(body=b"prompt=Hi", content_type=(
            "application/x-www-form-urlencoded")), 415, None),
        "multipart": (Raw(path="/generate", body=b"--x--", content_type=(
            "multipart/form-data; boundary=x")), 415, None),
        "application/jsonp": (Raw(body=prompt, content_type="application/jsonp"), 415, None),
        "text/plain, flush_cache": (Raw(path="/flush_cache", content_type="text/plain"), 415,
                                    None),
        # DNS rebinding: a name other than the address the server is bound to
        "Host evil.example": (Raw(body=prompt, host="evil.example"), 421, None),
        "Host with the port": (Raw(body=prompt, host="rebind.example:{port}"), 421, None),
        "Host localhost, wrong port": (Raw(method="GET", path="/v1/models",
                                           host="localhost:1"), 421, None),
        "Host localhost, no port": (Raw(method="GET", path="/health", host="localhost"), 421,
                                    None),
        "Host a.localhost": (Raw(method="GET", path="/health", host="a.localhost:{port}"), 421,
                             None),
        # bodies too large, and prompts too long to be worth tokenizing
        "Content-Length over the cap": (Raw(body=b"{}", headers={
            "Content-Length": str(MAX_BODY + 1)}), 413, None),
        "Content-Length 10^19 - 1": (Raw(path="/generate", headers={"Content-Length": "9" * 19}),
                                     413, None),  # h11 refuses longer numbers itself
        "chunked over the cap": (Raw(body=b" " * (1 << 20), chunks=MAX_BODY // (1 << 20) + 1),
                                 413, None),
        "prompt chars over the context": (Raw(body={"prompt": "ab" * max_prompt_chars}), 400,
                                          "prompt"),
        "chat chars over the context": (Raw(path="/v1/chat/completions", body={"messages": [
            {"role": "user", "content": "z" * (max_prompt_chars // 2 + 1)}] * 2}), 400,
            "messages"),
        "generate text over the context": (Raw(path="/generate", body={
            "text": "é" * (max_prompt_chars + 1)}), 400, "text"),
        # bodies that are not JSON a parser should accept
        "deep nesting": (Raw(body=b"[" * deep + b"]" * deep), 400, None),
        "deep nesting in a field": (Raw(body=b'{"prompt": ' + b"[" * deep + b"]" * deep + b"}"),
                                    400, None),
        "invalid UTF-8": (Raw(body=b'{"prompt": "\xff\xfe\xc3"}'), 400, None),
        "lone surrogate": (Raw(path="/generate", body=b'{"text": "\\ud800"}'), 400, None),
        "truncated JSON": (Raw(path="/v1/chat/completions", body=b'{"messages": [{"ro'), 400,
                           None),
        "empty body": (Raw(body=b""), 400, None),
        "null body": (Raw(path="/generate", body=b"null"), 400, None),
        # routes and methods that do not exist
        "unknown route": (Raw(method="GET", path="/v2/anything"), 404, None),
        "unknown POST route": (Raw(path="/v1/embeddings", body=prompt), 404, None),
        "GET a POST route": (Raw(method="GET", path="/v1/completions"), 405, None),
        "PUT": (Raw(method="PUT", path="/generate", body=prompt), 405, None),
        "DELETE": (Raw(method="DELETE", path="/health"), 405, None),
        "OPTIONS preflight": (Raw(method="OPTIONS", path="/v1/chat/completions", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}), 405,
            None),
    }


def check_openai_error(status: int, headers: dict[str, str], payload: bytes, want: int,
                       param: str | None, name: str) -> None:
    assert status == want, (name, status, payload[:300])
    assert headers["content-type"].startswith("application/json"), (name, headers)
    body = json.loads(payload)
    assert set(body) == {"error"}, (name, body)
    assert set(body["error"]) == {"message", "type", "param", "code"}, (name, body)
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], name
    assert body["error"]["type"] == "invalid_request_error", (name, body)
    if param is not None:
        assert body["error"]["param"] == param, (name, body)


def test_a_hostile_battery_alongside_normal_traffic_leaves_the_server_whole(server, llm,
                                                                           smollm2_dir):
    """Over 50 hostile requests, each answered with the right status and OpenAI's error shape,
    sent concurrently with normal chats; afterwards the same server answers greedy requests
    exactly as LLM.generate does and every KV page is free again."""
    rng = random.Random()
    vocab = json.loads((smollm2_dir / "config.json").read_text())["vocab_size"]
    cases = hostile_requests(vocab, 1024 * MAX_CHARS_PER_TOKEN, rng)  # --max-seq-len 1024
    assert len(cases) >= 40
    order = list(cases)
    rng.shuffle(order)
    questions = rng.sample(CHAT_PROMPTS, 4)

    def hostile(name: str) -> None:
        req, status, param = cases[name]
        req.host = req.host and req.host.format(port=server.port)
        check_openai_error(*req.send(server.port), status, param, name)

    def normal(question: str) -> str:
        sync = openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0)
        with sync:
            got = sync.chat.completions.create(model=server.model_name, messages=chat(question),
                                               temperature=0, max_tokens=16)
        assert got.choices[0].finish_reason in ("stop", "length")
        return got.choices[0].message.content

    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        answers = [pool.submit(normal, q) for q in questions]
        for future in [pool.submit(hostile, name) for name in order]:
            future.result()
        assert all(future.result() for future in answers)
    # The same server process still serves, greedy answers equal LLM.generate's.
    question = rng.choice(CHAT_PROMPTS)
    want = reference(llm, llm.tokenizer.apply_chat_template(chat(question)), 24)
    status, got = server.post("/v1/chat/completions", {"messages": chat(question),
                                                       "temperature": 0, "max_tokens": 24})
    assert status == 200 and got["choices"][0]["message"]["content"] == want["text"]
    ids = llm.tokenizer.encode("The three primary colors are")
    status, got = server.post("/generate", {"input_ids": ids, "sampling_params": {
        "max_new_tokens": 12, "temperature": 0}})
    assert status == 200 and got["output_ids"] == reference(llm, ids, 12)["token_ids"]
    stats = wait_idle(server)
    assert stats["free_pages"] + stats["cached_pages"] == stats["total_pages"]
    status, stats = server.post("/flush_cache", {})
    assert status == 200 and stats["free_pages"] == stats["total_pages"]


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8",
                                          "Application/JSON", "application/json ;charset=UTF-8"])
def test_json_content_type_with_parameters_is_accepted(server, content_type):
    status, _, payload = Raw(body={"prompt": "Hi", "max_tokens": 2},
                             content_type=content_type).send(server.port)
    assert status == 200, payload
    assert json.loads(payload)["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LOCALHOST:{port}"])
def test_the_bound_address_and_localhost_are_accepted_hosts(server, host):
    status, _, payload = Raw(method="GET", path="/v1/models",
                             host=host.format(port=server.port)).send(server.port)
    assert status == 200 and json.loads(payload)["data"][0]["id"] == server.model_name


def test_huge_prompts_are_refused_without_holding_the_tokenizers(server):
    """Ten prompts just over the character bound, sent together: all refused at the API in far
    less time than tokenizing them would take, while a normal request is answered meanwhile."""
    text = "Lorem ipsum dolor sit amet. " * (1024 * MAX_CHARS_PER_TOKEN // 28 + 1)
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=11) as pool:
        refused = [pool.submit(Raw(body={"prompt": text}).send, server.port) for _ in range(10)]
        ok = pool.submit(server.post, "/v1/completions", {"prompt": "Hi", "max_tokens": 2})
        for future in refused:
            check_openai_error(*future.result(), 400, "prompt", "huge prompt")
        assert ok.result()[0] == 200
    assert time.monotonic() - start < 30
