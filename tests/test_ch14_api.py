"""Chapter 14: the OpenAI-compatible server, driven by the official `openai` client and raw HTTP.

One server on SmolLM2 serves every test (fixture `smollm2_server` in conftest.py). Greedy answers
are compared with `LLM.generate` on the same token ids in this process.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import threading
import time

import openai
import pytest
from conftest import CHAT_PROMPTS

from minisgl.core import SamplingParams
from minisgl.llm import LLM


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


def reference(llm: LLM, ids: list[int], max_tokens: int) -> dict:
    return llm.generate([ids], SamplingParams(max_tokens=max_tokens), use_tqdm=False)[0]


def chat(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def sse_events(server, path: str, body: dict) -> tuple[list[object], list[bytes]]:
    """POST a streaming request; the parsed `data:` payloads and the raw lines."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    conn.request("POST", path, body=json.dumps(body))
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


def test_generate_endpoint_returns_llm_tokens(server, llm):
    ids = llm.tokenizer.apply_chat_template(chat("What is 17 times 23?"))
    want = reference(llm, ids, 16)
    status, body = server.post("/generate", {"input_ids": ids, "max_tokens": 16})
    assert status == 200, body
    assert body["token_ids"] == want["token_ids"] and body["text"] == want["text"]
    events, _ = sse_events(server, "/generate", {"input_ids": ids, "max_tokens": 16,
                                                 "stream": True})
    assert [t for e in events[:-1] for t in e["token_ids"]] == want["token_ids"]
    assert "".join(e["text"] for e in events[:-1]) == want["text"]


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
                        "input_ids": ids, "max_tokens": max_tokens, "stream": True})
                    assert events[-1] == "[DONE]"
                    text = "".join(e["text"] for e in events[:-1])
                    tokens = [t for e in events[:-1] for t in e["token_ids"]]
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
        {"prompt": "Once upon a time", "max_tokens": 900, "ignore_eos": True, "stream": True}))
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
    "n above 1": ({**GOOD, "n": 2}, 400, "n"),
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
    status, got = server.post("/generate", {"max_tokens": 3})
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
