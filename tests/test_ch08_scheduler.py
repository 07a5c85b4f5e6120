"""Chapter 8: the scheduler and continuous batching, checked against HF greedy generation."""

from __future__ import annotations

import random

import pytest
from conftest import CHAT_PROMPTS

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig


def make_scheduler(model_dir, **overrides) -> Scheduler:
    config = dict(model_path=str(model_dir), page_size=4, num_pages=256, cache_type="naive",
                  max_running_reqs=64, seed=0)
    return Scheduler(SchedulerConfig(**{**config, **overrides}))


def run_all(sched: Scheduler, pending: dict[int, list[int]] | None = None, check=True):
    """Step until idle; returns uid -> tokens and uid -> finish output."""
    tokens: dict[int, list[int]] = {}
    finished = {}
    while sched.has_work:
        for out in sched.step():
            if out.token is not None:
                tokens.setdefault(out.uid, []).append(out.token)
            if out.finished:
                finished[out.uid] = out
        if check:
            sched.check_integrity()
    return tokens, finished


def test_batched_requests_equal_hf_greedy(smollm2_dir, hf_greedy):
    sched = make_scheduler(smollm2_dir)
    prompts = [hf_greedy.chat_ids(p) for p in CHAT_PROMPTS[:6]]
    uids = [sched.add_request(p, SamplingParams(max_tokens=20)) for p in prompts]
    tokens, finished = run_all(sched)
    for uid, ids in zip(uids, prompts):
        assert tokens[uid] == hf_greedy.generate(ids, 20)
        assert finished[uid].finish_reason in ("stop", "length")
    assert sched.stats().decode_batches < 6 * 20  # requests shared decode steps
    assert sched.cache.free_tokens == sched.cache.capacity_tokens


def test_new_requests_join_a_running_batch(smollm2_dir, hf_greedy):
    sched = make_scheduler(smollm2_dir)
    first = [hf_greedy.chat_ids(p) for p in CHAT_PROMPTS[6:8]]
    later = [hf_greedy.chat_ids(p) for p in CHAT_PROMPTS[8:10]]
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    uids = [sched.add_request(p, params) for p in first]
    tokens: dict[int, list[int]] = {}
    for _ in range(4):  # prefill + a few decode steps of the first two
        for out in sched.step():
            tokens.setdefault(out.uid, []).append(out.token)
    uids += [sched.add_request(p, params) for p in later]
    sizes = []
    while sched.has_work:
        outs = sched.step()
        sizes.append(len(outs))
        for out in outs:
            tokens.setdefault(out.uid, []).append(out.token)
    assert 4 in sizes  # some decode step ran all four requests together
    for uid, ids in zip(uids, first + later):
        assert len(tokens[uid]) == 16
        expected = hf_greedy.generate(ids, 16)
        assert tokens[uid][: len(expected)] == expected  # HF stops at EOS; we ignore it


@pytest.mark.slow  # over 12 s on an idle 2-core machine
def test_kv_exhaustion_waits_and_retracts_but_never_fails(smollm2_dir, hf_greedy):
    sched = make_scheduler(smollm2_dir, num_pages=64, page_size=4)  # 256 token slots
    rng = random.Random(0)
    prompts = [hf_greedy.chat_ids(rng.choice(CHAT_PROMPTS)) for _ in range(50)]
    uids = [sched.add_request(p, SamplingParams(max_tokens=rng.randint(4, 24))) for p in prompts]
    tokens, finished = run_all(sched)
    assert len(finished) == 50 and all(f.finish_reason != "error" for f in finished.values())
    for uid, ids in zip(uids, prompts):
        max_tokens = len(tokens[uid]) if finished[uid].finish_reason == "stop" else None
        expected = hf_greedy.generate(ids, 24)
        assert tokens[uid] == expected[: len(tokens[uid])]
        if max_tokens is not None:
            assert tokens[uid] == expected[:max_tokens]
    assert sched.stats().retracted > 0
    assert sched.cache.free_tokens == sched.cache.capacity_tokens


def test_request_larger_than_the_pool_fails_alone(smollm2_dir, hf_greedy):
    sched = make_scheduler(smollm2_dir, num_pages=16, page_size=4)  # 64 slots
    good = hf_greedy.chat_ids("Hi!")
    ok_uid = sched.add_request(good, SamplingParams(max_tokens=8))
    bad_uid = sched.add_request(list(range(100, 160)), SamplingParams(max_tokens=10))
    tokens, finished = run_all(sched)
    assert finished[bad_uid].finish_reason == "error"
    assert "KV pool holds 64" in finished[bad_uid].error
    assert tokens[ok_uid] == hf_greedy.generate(good, 8)


def test_abort_frees_pages(smollm2_dir, hf_greedy):
    sched = make_scheduler(smollm2_dir)
    uid = sched.add_request(hf_greedy.chat_ids("Hi!"), SamplingParams(max_tokens=50,
                                                                     ignore_eos=True))
    sched.step()
    sched.step()
    assert sched.cache.free_tokens < sched.cache.capacity_tokens
    assert sched.abort(uid) and not sched.abort(uid)
    assert not sched.has_work
    assert sched.cache.free_tokens == sched.cache.capacity_tokens


@pytest.mark.parametrize("bad", [dict(page_size=0), dict(cache_type="lru"),
                                 dict(max_prefill_length=0), dict(memory_ratio=1.5)])
def test_bad_config_is_rejected(smollm2_dir, bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        SchedulerConfig(model_path=str(smollm2_dir), **bad)


def test_sampled_requests_run_beside_greedy_ones(smollm2_dir, hf_greedy):
    sched = make_scheduler(smollm2_dir)
    ids = hf_greedy.chat_ids(CHAT_PROMPTS[1])
    greedy = sched.add_request(ids, SamplingParams(max_tokens=12))
    sampled = sched.add_request(ids, SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12))
    tokens, _ = run_all(sched)
    assert tokens[greedy] == hf_greedy.generate(ids, 12)
    assert len(tokens[sampled]) >= 1 and all(0 <= t < 49152 for t in tokens[sampled])
