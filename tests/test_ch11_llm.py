"""Chapter 11: the offline LLM API, batched, against HF greedy one prompt at a time."""

from __future__ import annotations

import random

import pytest
from conftest import CHAT_PROMPTS
from test_ch09_chunked_prefill import long_prompt

from minisgl.benchmark.offline import make_workload, run_minisgl
from minisgl.core import SamplingParams
from minisgl.llm import LLM

MAX_TOKENS = 24


@pytest.fixture(scope="module")
def expected(hf_greedy):
    ids = [hf_greedy.chat_ids(p) for p in CHAT_PROMPTS]
    return ids, [hf_greedy.generate(i, MAX_TOKENS) for i in ids]


@pytest.mark.parametrize("page_size,cache", [(1, "radix"), (16, "radix"), (16, "naive")])
def test_16_chat_prompts_in_one_call_equal_hf(smollm2_dir, expected, page_size, cache):
    ids, want = expected
    llm = LLM(str(smollm2_dir), page_size=page_size, cache_type=cache, num_pages=8192 // page_size)
    results = llm.generate(ids, SamplingParams(max_tokens=MAX_TOKENS), use_tqdm=False)
    assert [r["token_ids"] for r in results] == want
    assert all(r["finish_reason"] in ("stop", "length") for r in results)
    assert "Paris" in results[0]["text"]
    llm.shutdown()


def test_string_prompts_and_per_prompt_params(smollm2_dir, hf_greedy):
    llm = LLM(str(smollm2_dir), num_pages=2048)
    text = hf_greedy.tokenizer.apply_chat_template(
        [{"role": "user", "content": CHAT_PROMPTS[0]}], tokenize=False, add_generation_prompt=True)
    results = llm.generate([text, text], [SamplingParams(max_tokens=8),
                                          SamplingParams(max_tokens=3, ignore_eos=True)],
                           use_tqdm=False)
    ids = llm.tokenizer.encode(text)
    assert results[0]["token_ids"] == hf_greedy.generate(ids, 8)
    assert len(results[1]["token_ids"]) == 3 and results[1]["finish_reason"] == "length"
    with pytest.raises(ValueError, match="2 prompts but 1 sampling params"):
        llm.generate([text, text], [SamplingParams()])
    with pytest.raises(TypeError):
        llm.generate([[1, "x"]])
    llm.shutdown()


def test_long_prompt_chunked_through_the_api(smollm2_dir, hf_greedy):
    ids = long_prompt(hf_greedy)
    llm = LLM(str(smollm2_dir), max_prefill_length=128, page_size=16, num_pages=256)
    result = llm.generate([ids], SamplingParams(max_tokens=12), use_tqdm=False)[0]
    assert result["token_ids"] == hf_greedy.generate(ids, 12)
    llm.shutdown()


def test_an_impossible_request_reports_an_error_and_the_rest_finish(smollm2_dir, hf_greedy):
    llm = LLM(str(smollm2_dir), num_pages=64)
    ok = hf_greedy.chat_ids("Hi!")
    results = llm.generate([ok, list(range(200, 300))], SamplingParams(max_tokens=8),
                           use_tqdm=False)
    assert results[0]["token_ids"] == hf_greedy.generate(ok, 8)
    assert results[1]["finish_reason"] == "error" and "KV pool" in results[1]["error"]
    # without max_tokens, a request runs to the end of the pool (64 slots), and one whose
    # prompt alone fills the pool is refused with the reason
    rng = random.Random()
    prompt = [rng.randrange(100, 40_000) for _ in range(rng.randint(33, 60))]  # two do not fit
    results = llm.generate([prompt, prompt + prompt], SamplingParams(max_tokens=None,
                                                                     ignore_eos=True),
                           use_tqdm=False)
    assert len(results[0]["token_ids"]) == 64 - len(prompt)
    assert results[0]["finish_reason"] == "length"
    assert results[1]["finish_reason"] == "error" and "KV pool holds 64" in results[1]["error"]
    llm.shutdown()


def test_offline_benchmark_runs_a_single_request(smollm2_dir):
    # its warm-up once took the first two requests' sampling params, and one request has only one
    llm = LLM(str(smollm2_dir), num_pages=256)
    work = make_workload(1, (4, 12), (2, 5), vocab=1000, seed=random.randrange(2**31))
    assert run_minisgl(llm, work) > 0  # it also checks that every request got its tokens
    llm.shutdown()
