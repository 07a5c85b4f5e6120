"""Chapter 9: a long prompt prefilled in chunks gives the same tokens as HF greedy."""

from __future__ import annotations

from test_ch08_scheduler import make_scheduler, run_all

from minisgl.core import SamplingParams

LONG_TEXT = " ".join(f"Fact {i}: the number {i} squared is {i * i}." for i in range(40))


def long_prompt(hf_greedy) -> list[int]:
    ids = hf_greedy.chat_ids(LONG_TEXT + " Which fact mentions the number 7?")
    assert 650 <= len(ids) <= 900, len(ids)
    return ids


def test_700_token_prompt_in_chunks_of_128(smollm2_dir, hf_greedy):
    ids = long_prompt(hf_greedy)
    sched = make_scheduler(smollm2_dir, max_prefill_length=128, page_size=16, num_pages=128)
    uid = sched.add_request(ids, SamplingParams(max_tokens=16))
    tokens, _ = run_all(sched)
    assert sched.stats().prefill_batches == -(-len(ids) // 128)  # ceil: one chunk per batch
    assert tokens[uid] == hf_greedy.generate(ids, 16)


def test_a_chunked_prompt_does_not_block_short_requests(smollm2_dir, hf_greedy):
    """While the long prompt is chunked, the short request that arrived with it still starts."""
    long_ids, short_ids = long_prompt(hf_greedy), hf_greedy.chat_ids("Hi!")
    sched = make_scheduler(smollm2_dir, max_prefill_length=256, page_size=1, num_pages=2048)
    short_uid = sched.add_request(short_ids, SamplingParams(max_tokens=8))
    long_uid = sched.add_request(long_ids, SamplingParams(max_tokens=8))
    first_token_step = {}
    step = 0
    tokens = {}
    while sched.has_work:
        step += 1
        for out in sched.step():
            first_token_step.setdefault(out.uid, step)
            tokens.setdefault(out.uid, []).append(out.token)
    # >>> before ch16
    # assert first_token_step[short_uid] == 1  # shared the first prefill batch with a chunk
    # <<< before ch16
    # >>> ch16
    # It shared the first prefill batch with a chunk; with overlap scheduling (chapter 16) the
    # token of a step is read by the next step() call.
    assert first_token_step[short_uid] == (2 if sched.overlap else 1)
    # <<< ch16
    assert first_token_step[long_uid] > 1
    assert tokens[short_uid] == hf_greedy.generate(short_ids, 8)
    assert tokens[long_uid] == hf_greedy.generate(long_ids, 8)


def test_chunked_prompt_gives_back_its_pages_when_decode_runs_out(smollm2_dir, hf_greedy):
    """A half-prefilled prompt holds pages; when the running request needs them it must yield
    them (and restart its prompt later) instead of the engine failing."""
    short_ids = hf_greedy.chat_ids("Name three colors.")
    long_ids = long_prompt(hf_greedy)[:40]
    sched = make_scheduler(smollm2_dir, max_prefill_length=10, page_size=1,
                           num_pages=len(short_ids) + 40)
    a = sched.add_request(short_ids, SamplingParams(max_tokens=40, ignore_eos=True))
    assert len(short_ids) + 40 >= 40 + 20  # each fits alone, the two do not fit together
    b = sched.add_request(long_ids, SamplingParams(max_tokens=20, ignore_eos=True))
    tokens, finished = run_all(sched)
    assert finished[a].finish_reason == finished[b].finish_reason == "length"
    assert sched.stats().restarted_prefills > 0
    expected = hf_greedy.generate(short_ids, 40)
    assert tokens[a][: len(expected)] == expected
    assert sched.cache.free_tokens == sched.cache.capacity_tokens
