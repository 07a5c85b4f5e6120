"""Chapter 16 through the API (issue 16): log-probs, seeds, n > 1 and penalties on SmolLM2.

References: HF transformers' logits on the same weights (log-softmax, and the penalty formula of
tests/test_ch16_sampler.py applied in plain Python). One server serves the whole module, through
the official openai client and raw HTTP.
"""

from __future__ import annotations

import math
import random
import time

import openai
import pytest
import torch
from conftest import RunningServer
from test_ch16_sampler import _reference_penalties


@pytest.fixture(scope="module")
def server(smollm2_dir):
    # fp32 on a GPU too: the references are HF transformers' fp32 logits
    srv = RunningServer(["--model", str(smollm2_dir), "--num-pages", "4096", "--max-seq-len",
                         "1024", "--dtype", "float32"])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="none", max_retries=0,
                         timeout=300)


@pytest.fixture(scope="module")
def hf_model(smollm2_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_dir, torch_dtype=torch.float32).eval()


def hf_log_softmax(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].double().log_softmax(-1)


def random_prompt(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 40000) for _ in range(n)]


def warm(server, prompt: list[int]) -> None:
    """Put the prompt in the prefix cache, so that the requests after this one all compute the
    same thing: a seeded draw depends on the seed and the position only, but the logits it draws
    from are bitwise equal only along the same path. A prompt computed whole and one found in the
    cache differ in the last bits, and the inverse-CDF draw over ~50k tokens moves to a
    neighbouring token when u lands that close to a boundary (5 of 300 four-token samples on
    random prompts, measured; engine/device_sample.py's docstring says more)."""
    status, _ = server.post("/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": 1, "temperature": 0.0}})
    assert status == 200


def test_completion_logprobs_are_the_log_softmax_of_the_logits(server, client, hf_model,
                                                               smollm2_dir):
    """Sampled at temperature 1 with a seed; the same seed through /generate names the tokens.

    Each entry of `tokens` is that token decoded on its own, so when a sampled token holds only
    part of a multi-byte character (temperature 1 reaches such byte pieces now and then) the
    entry shows U+FFFD while the text shows the whole character: the tokens then join to the
    text only where every piece is whole, as in OpenAI's legacy logprobs."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    rng = random.Random()
    prompt, seed = random_prompt(rng, 12), rng.randrange(1 << 40)
    warm(server, prompt)
    got = client.completions.create(model=server.model_name, prompt=prompt, max_tokens=4,
                                    temperature=1.0, seed=seed, logprobs=5,
                                    extra_body={"ignore_eos": True})
    lp = got.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    status, same = server.post("/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": 4, "temperature": 1.0, "sampling_seed": seed, "ignore_eos": True}})
    assert status == 200 and same["text"] == got.choices[0].text
    assert lp.tokens == [tok.decode([t]) for t in same["output_ids"]]
    if not any("\ufffd" in t for t in lp.tokens):
        assert "".join(lp.tokens) == got.choices[0].text
    context = list(prompt)
    for step, token in enumerate(same["output_ids"]):
        ref = hf_log_softmax(hf_model, context)
        assert abs(lp.token_logprobs[step] - ref[token].item()) < 1e-4
        # the top 5 (the dict also holds the sampled token when it is not among them)
        values = sorted(lp.top_logprobs[step].values(), reverse=True)[:5]
        assert torch.allclose(torch.tensor(values, dtype=torch.float64), ref.topk(5).values,
                              atol=1e-4)
        assert len(lp.top_logprobs[step]) <= 6
        assert lp.text_offset[step] == sum(len(t) for t in lp.tokens[:step])
        context.append(token)


def test_chat_logprobs_shape_and_values(server, client, hf_model, smollm2_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    got = client.chat.completions.create(model=server.model_name, messages=messages,
                                         max_tokens=6, temperature=0, logprobs=True,
                                         top_logprobs=3)
    content = got.choices[0].logprobs.content
    assert "".join(t.token for t in content) == got.choices[0].message.content
    from minisgl.tokenizer.tokenize import load_tokenizer

    context = load_tokenizer(smollm2_dir).apply_chat_template(messages)  # the server's prompt
    assert len(context) == got.usage.prompt_tokens
    for t in content:
        ref = hf_log_softmax(hf_model, context)
        token = int(ref.argmax())  # greedy: the most likely token
        assert t.token == tok.decode([token]) and bytes(t.bytes) == t.token.encode()
        assert abs(t.logprob - ref[token].item()) < 1e-4
        top = ref.topk(3)
        assert [x.token for x in t.top_logprobs] == [tok.decode([i]) for i in top.indices]
        assert all(abs(x.logprob - v) < 1e-4 for x, v in zip(t.top_logprobs, top.values.tolist()))
        context.append(token)
    # logprobs without top_logprobs: each token's own, no alternatives
    got = client.chat.completions.create(model=server.model_name, messages=messages,
                                         max_tokens=3, temperature=0, logprobs=True)
    assert all(t.top_logprobs == [] for t in got.choices[0].logprobs.content)
    plain = client.chat.completions.create(model=server.model_name, messages=messages,
                                           max_tokens=3, temperature=0)
    assert plain.choices[0].logprobs is None


def test_streamed_logprobs_match_the_whole_answer(server, client):
    messages = [{"role": "user", "content": "Name a color."}]
    once = client.chat.completions.create(model=server.model_name, messages=messages,
                                          max_tokens=6, temperature=0, logprobs=True,
                                          top_logprobs=2)
    chunks = list(client.chat.completions.create(
        model=server.model_name, messages=messages, max_tokens=6, temperature=0, logprobs=True,
        top_logprobs=2, stream=True))
    streamed = [t for c in chunks for ch in c.choices if ch.logprobs for t in ch.logprobs.content]
    whole = once.choices[0].logprobs.content
    # the same tokens; the values within rounding (the second request reads the prompt's K/V
    # from the prefix cache instead of computing it in the same pass)
    assert [t.token for t in streamed] == [t.token for t in whole]
    assert all(abs(a.logprob - b.logprob) < 1e-4 for a, b in zip(streamed, whole))
    got = list(client.completions.create(model=server.model_name, prompt="Once upon",
                                         max_tokens=5, temperature=0, logprobs=1, stream=True,
                                         extra_body={"ignore_eos": True}))
    offsets = [o for c in got for ch in c.choices if ch.logprobs for o in ch.logprobs.text_offset]
    tokens = [t for c in got for ch in c.choices if ch.logprobs for t in ch.logprobs.tokens]
    assert offsets == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]


def test_same_seed_same_text_different_seeds_differ(server, client):
    kwargs = dict(model=server.model_name, prompt="The weather today is", max_tokens=16,
                  temperature=1.0, extra_body={"ignore_eos": True})
    a = client.completions.create(seed=1234, **kwargs).choices[0].text
    b = client.completions.create(seed=1234, **kwargs).choices[0].text
    others = {client.completions.create(seed=s, **kwargs).choices[0].text for s in (1, 2, 3)}
    assert a == b
    assert len(others | {a}) >= 3


def test_n_answers_share_one_prefill(server, client):
    rng = random.Random()
    prompt = random_prompt(rng, 40)  # never seen before: nothing of it is cached
    status, outs = server.post("/generate", {"input_ids": prompt, "sampling_params": {
        "max_new_tokens": 5, "n": 3, "temperature": 1.0, "sampling_seed": 7,
        "ignore_eos": True}})
    assert status == 200 and isinstance(outs, list) and len(outs) == 3
    cached = [o["meta_info"]["cached_tokens"] for o in outs]
    # the first computes the prompt; the others find it in the prefix cache (all of it but
    # what must be computed again to sample from: the last token at least)
    assert cached[0] == 0 and all(c >= len(prompt) - 8 for c in cached[1:]), cached
    assert len({tuple(o["output_ids"]) for o in outs}) == 3  # a seed each
    # the first of n draws what n=1 draws with the same seed (on a cached prompt: both then
    # compute the same logits, see warm)
    other = random_prompt(rng, 12)
    warm(server, other)
    first_of_n = [server.post("/generate", {"input_ids": other, "sampling_params": {
        "max_new_tokens": 5, "temperature": 1.0, "sampling_seed": 7, "ignore_eos": True,
        **extra}})[1] for extra in ({"n": 3}, {})]
    assert first_of_n[1]["output_ids"] == first_of_n[0][0]["output_ids"]
    # openai client: chat and completions, streamed and not
    messages = [{"role": "user", "content": f"Say something about the number {rng.random()}"}]
    chat = client.chat.completions.create(model=server.model_name, messages=messages,
                                          max_tokens=6, n=3, temperature=1.0, seed=3)
    assert [c.index for c in chat.choices] == [0, 1, 2]
    assert len({c.message.content for c in chat.choices}) >= 2
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    chunks = list(client.completions.create(model=server.model_name, prompt=prompt, max_tokens=4,
                                            n=2, temperature=1.0, seed=9, stream=True,
                                            stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))
    texts = {0: "", 1: ""}
    for c in chunks:
        for ch in c.choices:
            texts[ch.index] += ch.text
    whole = client.completions.create(model=server.model_name, prompt=prompt, max_tokens=4, n=2,
                                      temperature=1.0, seed=9, extra_body={"ignore_eos": True})
    assert [texts[0], texts[1]] == [c.text for c in whole.choices]
    assert chunks[-1].usage.completion_tokens == 8 == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == len(prompt) == whole.usage.prompt_tokens


def test_penalties_through_the_server_match_the_formula(server, hf_model):
    """Greedy with penalties (deterministic): each token is the argmax of HF's logits after the
    reference formula over the tokens so far."""
    rng = random.Random()
    prompt = random_prompt(rng, 10)
    for sp in ({"presence_penalty": 1.2, "frequency_penalty": 0.8},
               {"repetition_penalty": 1.4}, {"frequency_penalty": -1.0, "repetition_penalty": 0.8}):
        status, got = server.post("/generate", {"input_ids": prompt, "sampling_params": {
            "max_new_tokens": 6, "temperature": 0, "ignore_eos": True, **sp}})
        assert status == 200, got
        ids = list(prompt)
        for _ in range(6):
            with torch.no_grad():
                logits = hf_model(torch.tensor([ids])).logits[0, -1].tolist()
            ref = _reference_penalties(logits, prompt, ids[len(prompt):],
                                       sp.get("presence_penalty", 0.0),
                                       sp.get("frequency_penalty", 0.0),
                                       sp.get("repetition_penalty", 1.0))
            ids.append(max(range(len(ref)), key=ref.__getitem__))
        assert got["output_ids"] == ids[len(prompt):], sp


CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
PROMPT = {"prompt": "Hi", "max_tokens": 2}
GEN = {"text": "Hi", "sampling_params": {"max_new_tokens": 2}}

HOSTILE = [  # (path, body, the field the 400 must name)
    *[("/v1/chat/completions", {**CHAT, **extra}, name) for name, extra in [
        ("n", {"n": 0}), ("n", {"n": 17}), ("n", {"n": 1 << 40}), ("n", {"n": 2.5}),
        ("n", {"n": "3"}), ("n", {"n": True}),
        ("presence_penalty", {"presence_penalty": 2.01}),
        ("presence_penalty", {"presence_penalty": "1"}),
        ("frequency_penalty", {"frequency_penalty": -2.5}),
        ("frequency_penalty", {"frequency_penalty": 1e308}),
        ("repetition_penalty", {"repetition_penalty": 0}),
        ("repetition_penalty", {"repetition_penalty": -1}),
        ("repetition_penalty", {"repetition_penalty": 101}),
        ("top_logprobs", {"logprobs": True, "top_logprobs": 21}),
        ("top_logprobs", {"logprobs": True, "top_logprobs": -1}),
        ("top_logprobs", {"top_logprobs": 3}),  # without logprobs: true
        ("top_logprobs", {"logprobs": False, "top_logprobs": 2}),
        ("logprobs", {"logprobs": 1}), ("logprobs", {"logprobs": "true"})]],
    *[("/v1/completions", {**PROMPT, **extra}, name) for name, extra in [
        ("logprobs", {"logprobs": 6}), ("logprobs", {"logprobs": -1}),
        ("logprobs", {"logprobs": True}), ("n", {"n": 17}), ("n", {"n": -1}),
        ("best_of", {"best_of": 2}),
        ("repetition_penalty", {"repetition_penalty": 1e300})]],
    *[("/generate", {**GEN, **extra}, name) for name, extra in [
        ("sampling_params.n", {"sampling_params": {"n": 17}}),
        ("sampling_params.n", {"sampling_params": {"n": 0}}),
        ("sampling_params.presence_penalty", {"sampling_params": {"presence_penalty": 3}}),
        ("sampling_params.frequency_penalty", {"sampling_params": {"frequency_penalty": -3}}),
        ("sampling_params.repetition_penalty", {"sampling_params": {
            "repetition_penalty": 0.0}}),
        ("return_logprob", {"return_logprob": True})]],
]


def test_hostile_values_are_a_400_naming_the_field(server):
    for path, body, name in HOSTILE:
        status, got = server.post(path, body)
        assert status == 400, (path, body, got)
        assert got["error"]["param"] == name, (path, body, got)
    for path, body in [  # the bounds themselves are accepted
            ("/v1/chat/completions", {**CHAT, "n": 16, "presence_penalty": -2,
                                      "frequency_penalty": 2, "repetition_penalty": 100,
                                      "logprobs": True, "top_logprobs": 20}),
            ("/v1/completions", {**PROMPT, "logprobs": 5, "n": 1, "repetition_penalty": 1e-3}),
            ("/generate", {**GEN, "sampling_params": {"max_new_tokens": 1, "n": 16,
                                                      "presence_penalty": 2}})]:
        status, got = server.post(path, body)
        assert status == 200, (path, got)
        if path == "/v1/chat/completions":
            assert len(got["choices"]) == 16
            assert all(len(t["top_logprobs"]) == 20
                       for c in got["choices"] for t in c["logprobs"]["content"])
            assert all(not math.isnan(t["logprob"])
                       for c in got["choices"] for t in c["logprobs"]["content"])


# ---- /generate with a batch of prompts (issue 28, item 7) --------------------------------------


def test_generate_answers_a_batch_of_prompts_in_order(server):
    """A list of token-id lists (or of texts) gets a list of answers, one per prompt in the
    order given, each prompt's n answers in a row; a one-prompt batch answers as that prompt
    alone does."""
    rng = random.Random()
    prompts = [random_prompt(rng, n) for n in rng.sample(range(4, 30), 3)]
    greedy = {"max_new_tokens": 4, "temperature": 0, "ignore_eos": True}
    status, outs = server.post("/generate", {"input_ids": prompts, "sampling_params": greedy})
    assert status == 200 and isinstance(outs, list), outs
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == [len(p) for p in prompts]
    assert all(len(o["output_ids"]) == 4 for o in outs)
    assert len({o["meta_info"]["id"] for o in outs}) == 3
    warm(server, prompts[0])  # both requests below find it cached: the same logits (see warm)
    alone = server.post("/generate", {"input_ids": prompts[0], "sampling_params": greedy})[1]
    batch_of_one = server.post("/generate", {"input_ids": prompts[:1],
                                             "sampling_params": greedy})[1]
    assert isinstance(batch_of_one, list) and len(batch_of_one) == 1
    assert batch_of_one[0]["output_ids"] == alone["output_ids"]
    texts = ["The capital of France is", "Hi", "Count: 1, 2, 3,"]
    status, outs = server.post("/generate", {"text": texts, "sampling_params": {
        "max_new_tokens": 3, "n": 2, "temperature": 1.0, "ignore_eos": True}})
    assert status == 200 and len(outs) == 6, outs
    singles = [server.post("/generate", {"text": t, "sampling_params": {"max_new_tokens": 1}})[1]
               for t in texts]
    assert [o["meta_info"]["prompt_tokens"] for o in outs] == \
        [s["meta_info"]["prompt_tokens"] for s in singles for _ in range(2)]


def test_a_batch_with_a_bad_prompt_is_refused_whole(server):
    """One prompt the API refuses (too long, an id outside the vocabulary) or the engine
    refuses (prompt + max_new_tokens over the context) fails the batch with its 400; the
    prompts that had started are aborted, and nothing is left running."""
    rng = random.Random()
    good = random_prompt(rng, 8)
    for prompts, params, param in [
            ([good, random_prompt(rng, 1024)], {}, "input_ids"),
            ([good, [1, 49152]], {}, "input_ids"),
            ([good] * 5, {"n": 13}, "input_ids"),  # 65 answers: more than 64
            (["Hi", ""], {"n": 2, "stop": ["x"] * 17}, "sampling_params.stop")]:
        key = "text" if isinstance(prompts[0], str) else "input_ids"
        status, got = server.post("/generate", {key: prompts, "sampling_params": params})
        assert status == 400 and got["error"]["param"] == param, (prompts, got)
    status, got = server.post("/generate", {"input_ids": [good, good], "stream": True})
    assert status == 400 and got["error"]["param"] == "stream"
    status, got = server.post("/generate", {"input_ids": [good, random_prompt(rng, 1000)],
                                            "sampling_params": {"max_new_tokens": 100,
                                                                "ignore_eos": True}})
    assert status == 400 and "exceeds the context length" in got["error"]["message"], got
    deadline = time.monotonic() + 60
    while (health := server.health())["running_requests"] or health["request_pages"]:
        assert time.monotonic() < deadline, health
        time.sleep(0.2)
