"""Chapter 16: overlap scheduling gives the same tokens as the one-step-at-a-time loop.

Every test runs the same script of events (requests added at given steps, aborts at given steps)
twice on a tiny random Qwen3, with MINISGL_DISABLE_OVERLAP_SCHEDULING=1 and without, and compares
the outputs token for token. The plain reference for the sequence itself is the greedy run with
ignore_eos cut after its first end-of-sequence token (plain Python). After every step the page
accounting must hold (check_integrity), and at the end every page is free or cached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import torch
from test_ch03_models import save_random_hf_model

from minisgl.core import SamplingParams, TokenOutput
from minisgl.env import load_env
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.scheduler.scheduler import NOT_READ

VOCAB = 320  # tests/test_ch03_models.py's TINY config
# On a GPU the same tests run the real thing: Triton attention, CUDA graphs, the step in flight.
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    save_random_hf_model(path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         head_dim=16, num_hidden_layers=2)
    return path


def make_scheduler(model_dir, monkeypatch, overlap: bool, **overrides) -> Scheduler:
    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP_SCHEDULING", "0" if overlap else "1")
    config = dict(model_path=str(model_dir), page_size=4, num_pages=128, max_running_reqs=16,
                  seed=0, device=DEVICE)
    sched = Scheduler(SchedulerConfig(**{**config, **overrides}))
    assert sched.overlap == overlap
    return sched


def random_prompts(n: int, seed: int, shared_prefix: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, VOCAB, (shared_prefix,), generator=gen).tolist()
    lens = torch.randint(2, 30, (n,), generator=gen).tolist()
    return [prefix + torch.randint(0, VOCAB, (k,), generator=gen).tolist() for k in lens]


@dataclass
class Script:
    """What happens at which step: requests to add, uids to abort."""

    adds: dict[int, list[tuple[list[int], SamplingParams]]]
    aborts: dict[int, list[int]] = field(default_factory=dict)  # step -> request numbers


@dataclass
class Run:
    tokens: dict[int, list[int]]  # request number -> tokens
    ends: dict[int, TokenOutput]  # request number -> its finishing output
    steps: int
    stats: object


def play(sched: Scheduler, script: Script, eos: set[int] | None = None) -> Run:
    if eos is not None:
        sched.eos_token_ids = eos
    uid_of: dict[int, int] = {}
    number_of: dict[int, int] = {}
    tokens: dict[int, list[int]] = {}
    ends: dict[int, TokenOutput] = {}

    def take(outs: list[TokenOutput]) -> None:
        for out in outs:
            n = number_of[out.uid]
            assert n not in ends, f"request {n} produced output after it finished"
            if out.token is not None:
                assert out.token != NOT_READ and 0 <= out.token < VOCAB
                tokens.setdefault(n, []).append(out.token)
            if out.finished:
                ends[n] = out

    step = 0
    last_event = max([*script.adds, *script.aborts], default=0)
    while step <= last_event or sched.has_work:
        for prompt, params in script.adds.get(step, []):
            n = len(uid_of)
            uid_of[n] = sched.add_request(prompt, params)
            number_of[uid_of[n]] = n
        for n in script.aborts.get(step, []):
            last = sched.abort(uid_of[n])
            if last is not None:
                take([last])
        take(sched.step())
        sched.check_integrity()
        step += 1
        assert step < 2000
    stats = sched.stats()
    assert stats.request_pages == 0 and stats.running_requests == stats.waiting_requests == 0
    assert stats.free_pages + stats.cached_pages == stats.total_pages
    sched.flush_cache()
    assert sched.cache.free_tokens == sched.cache.capacity_tokens
    assert len(ends) == len(uid_of)
    sched.shutdown()
    return Run(tokens, ends, step, stats)


def both(model_dir, monkeypatch, script: Script, eos=None, **overrides) -> tuple[Run, Run]:
    off = play(make_scheduler(model_dir, monkeypatch, False, **overrides), script, eos)
    on = play(make_scheduler(model_dir, monkeypatch, True, **overrides), script, eos)
    assert on.tokens == off.tokens
    assert {n: (e.finish_reason, e.token) for n, e in on.ends.items()} == \
        {n: (e.finish_reason, e.token) for n, e in off.ends.items()}
    return off, on


def greedy(max_tokens: int, ignore_eos: bool = True) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, ignore_eos=ignore_eos)


def test_the_flag_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("MINISGL_DISABLE_OVERLAP_SCHEDULING", raising=False)
    assert load_env().disable_overlap_scheduling is False
    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP_SCHEDULING", "1")
    assert load_env().disable_overlap_scheduling is True
    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP_SCHEDULING", "maybe")
    with pytest.raises(ValueError, match="MINISGL_DISABLE_OVERLAP_SCHEDULING"):
        load_env()


def test_tokens_come_back_one_step_late(tiny_qwen3, monkeypatch):
    """With overlap, step k returns the tokens of the batch launched at step k-1."""
    sched = make_scheduler(tiny_qwen3, monkeypatch, True)
    uid = sched.add_request(random_prompts(1, 0)[0], greedy(3))
    assert sched.step() == []  # the prefill is launched, its token not read yet
    assert sched.has_work
    first = sched.step()  # launches decode 1, reads the prefill's token
    assert [o.uid for o in first] == [uid] and not first[0].finished
    second = sched.step()  # launches decode 2 (the last: max_tokens is known), reads decode 1
    third = sched.step()  # launches nothing, reads decode 2
    assert [o.finished for o in second + third] == [False, True]
    assert third[0].finish_reason == "length"
    assert not sched.has_work and sched.stats().decode_batches == 2
    sched.check_integrity()


def test_requests_finishing_at_different_steps_and_joining_late(tiny_qwen3, monkeypatch):
    prompts = random_prompts(10, 1)
    adds = {0: [(p, greedy(n)) for p, n in zip(prompts[:6], (1, 2, 5, 9, 3, 14))],
            3: [(p, greedy(n)) for p, n in zip(prompts[6:8], (4, 1))],
            7: [(p, greedy(n)) for p, n in zip(prompts[8:], (6, 11))]}
    off, on = both(tiny_qwen3, monkeypatch, Script(adds))
    lengths = [1, 2, 5, 9, 3, 14, 4, 1, 6, 11]
    assert [len(off.tokens[n]) for n in range(10)] == lengths
    assert on.stats.decode_batches == off.stats.decode_batches  # no step wasted on the length
    assert on.steps == off.steps + 1  # the last tokens are read one step later


def test_end_of_sequence_found_one_step_late(tiny_qwen3, monkeypatch):
    """Requests stop at an EOS token at different steps; the extra token overlap samples for
    a stopped request is dropped, and the result is the ignore_eos run cut after its first EOS."""
    prompts = random_prompts(8, 2)
    long_run = both(tiny_qwen3, monkeypatch, Script({0: [(p, greedy(16)) for p in prompts]}))[0]
    counts: dict[int, int] = {}
    for seq in long_run.tokens.values():
        for t in seq[1:-1]:
            counts[t] = counts.get(t, 0) + 1
    eos = max(counts, key=counts.get)  # a token that many sequences hit mid-way
    script = Script({0: [(p, greedy(16, ignore_eos=False)) for p in prompts]})
    off, on = both(tiny_qwen3, monkeypatch, script, eos={eos})
    stopped = 0
    for n, full in long_run.tokens.items():
        expected = full[: full.index(eos) + 1] if eos in full else full
        assert off.tokens[n] == expected
        reason = "stop" if eos in full else "length"
        assert off.ends[n].finish_reason == reason
        stopped += reason == "stop" and len(expected) < 16
    assert stopped >= 2


def test_abort_mid_stream(tiny_qwen3, monkeypatch):
    """An abort cuts a request wherever it is: waiting, in the step in flight, or already
    finished. With overlap the host is one step behind, so an abort at the same step keeps one
    token fewer; what was sent is a prefix of the uninterrupted run either way, and the other
    requests are not disturbed."""
    prompts = random_prompts(6, 3)
    adds = {0: [(p, greedy(12)) for p in prompts[:4]], 2: [(prompts[4], greedy(12))],
            5: [(prompts[5], greedy(3))]}
    full = play(make_scheduler(tiny_qwen3, monkeypatch, False), Script(adds))
    script = Script(adds, aborts={0: [3], 1: [0], 4: [1, 4], 6: [5], 30: [2]})
    off = play(make_scheduler(tiny_qwen3, monkeypatch, False), script)
    on = play(make_scheduler(tiny_qwen3, monkeypatch, True), script)
    for run in (off, on):
        for n, seq in run.tokens.items():
            assert seq == full.tokens[n][: len(seq)]
        assert len(run.tokens.get(1, [])) > 0  # aborted mid-stream, after some tokens
        assert [run.ends[n].finish_reason for n in range(6)] == \
            ["abort", "abort", "length", "abort", "abort", "abort"]
        assert 3 not in run.tokens  # aborted before its prefill ran
        assert all(len(run.tokens.get(n, [])) < 12 for n in (0, 1, 4))
        assert run.ends[2].token is not None and len(run.tokens[2]) == 12


def test_retraction_in_a_tiny_pool(tiny_qwen3, monkeypatch):
    """24 pages of 4 tokens for requests that together need far more: running requests are
    retracted and prefilled again, mid-stream; a chunked prompt also gives its pages back."""
    prompts = random_prompts(8, 4)
    adds = {0: [(p, greedy(n)) for p, n in zip(prompts, (20, 25, 18, 30, 22, 15, 28, 19))]}
    off, on = both(tiny_qwen3, monkeypatch, Script(adds), num_pages=24, max_prefill_length=24)
    assert off.stats.retracted > 0 and on.stats.retracted > 0
    # the reference: each request alone, in a pool it fits in
    alone = play(make_scheduler(tiny_qwen3, monkeypatch, False), Script(adds))
    assert on.tokens == alone.tokens


def test_shared_prefixes_and_chunked_prefill(tiny_qwen3, monkeypatch):
    prompts = random_prompts(8, 5, shared_prefix=12)
    script = Script({0: [(p, greedy(6)) for p in prompts[:4]],
                     2: [(p, greedy(6)) for p in prompts[4:]]})
    off, on = both(tiny_qwen3, monkeypatch, script, max_prefill_length=16)
    alone = play(make_scheduler(tiny_qwen3, monkeypatch, False, cache_type="naive"), script)
    assert on.tokens == alone.tokens


def test_seeded_sampling_is_the_same_with_and_without_overlap(tiny_qwen3, monkeypatch):
    prompts = random_prompts(6, 6)
    params = [SamplingParams(temperature=0.9, top_p=0.95, max_tokens=8, ignore_eos=True, seed=s)
              for s in range(6)]
    off, on = both(tiny_qwen3, monkeypatch, Script({0: list(zip(prompts, params))}))
    # the same request alone, in another row and another batch, draws the same tokens
    solo = play(make_scheduler(tiny_qwen3, monkeypatch, True),
                Script({0: [(prompts[4], params[4])]}))
    assert solo.tokens[0] == on.tokens[4]


def test_penalties_are_the_same_with_and_without_overlap_and_match_the_formula(tiny_qwen3,
                                                                                monkeypatch):
    """Greedy decoding with penalties is deterministic: overlap on == off, also when requests
    are retracted (their counts restart from prompt + output), and each token is the argmax of
    HF transformers' logits after the penalty formula (plain Python over the tokens so far)."""
    from test_ch16_sampler import _reference_penalties
    from transformers import AutoModelForCausalLM

    prompts = random_prompts(5, 7)
    params = [SamplingParams(max_tokens=14, ignore_eos=True, presence_penalty=p, frequency_penalty=f,
                             repetition_penalty=r)
              for p, f, r in ((1.5, 0.5, 1.0), (0.0, 2.0, 1.3), (0.0, 0.0, 1.8), (-1.0, 0.0, 0.7),
                              (0.0, 0.0, 1.0))]
    script = Script({0: list(zip(prompts, params))})
    off, on = both(tiny_qwen3, monkeypatch, script, num_pages=14, max_prefill_length=24)
    assert on.stats.retracted > 0
    hf = AutoModelForCausalLM.from_pretrained(tiny_qwen3, torch_dtype=torch.float32).eval()
    for n in (0, 1, 2, 3):
        p, ids = params[n], list(prompts[n])
        for _ in range(p.max_tokens):
            with torch.no_grad():
                logits = hf(torch.tensor([ids])).logits[0, -1].tolist()
            ref = _reference_penalties(logits, prompts[n], ids[len(prompts[n]):],
                                       p.presence_penalty, p.frequency_penalty,
                                       p.repetition_penalty)
            ids.append(max(range(len(ref)), key=ref.__getitem__))
        assert on.tokens[n] == ids[len(prompts[n]):], n


def record_passes(sched: Scheduler) -> list[tuple[bool, list[int]]]:
    """Every forward pass the scheduler launches, in order: (is it a prefill, its uids)."""
    passes: list[tuple[bool, list[int]]] = []
    inner = sched.engine.forward_batch

    def forward_batch(batch):
        passes.append((batch.is_prefill, [r.uid for r in batch.reqs]))
        return inner(batch)

    sched.engine.forward_batch = forward_batch
    return passes


@pytest.mark.parametrize("overlap", [False, True])
def test_running_requests_decode_between_the_chunks_of_a_long_prompt(tiny_qwen3, monkeypatch,
                                                                      overlap):
    """Chapter 9's rule with the step in flight: after each chunk of a long prompt the running
    requests decode once, and a short prompt that arrives mid-way starts before the long
    prompt's last chunk. The tokens are those of each request run alone."""
    prompts = random_prompts(3, 8)
    gen = torch.Generator().manual_seed(9)
    long_prompt = torch.randint(0, VOCAB, (150,), generator=gen).tolist()  # 10 chunks of 16
    short_prompt = torch.randint(0, VOCAB, (6,), generator=gen).tolist()
    adds = {0: [(p, greedy(30)) for p in prompts], 2: [(long_prompt, greedy(4))],
            6: [(short_prompt, greedy(3))]}
    sched = make_scheduler(tiny_qwen3, monkeypatch, overlap, max_prefill_length=16)
    passes = record_passes(sched)
    run = play(sched, Script(adds))  # uids are the request numbers: 0-2 run, 3 long, 4 short
    chunks = [i for i, (prefill, uids) in enumerate(passes) if prefill and 3 in uids]
    assert len(chunks) == 10
    for lo, hi in zip(chunks, chunks[1:]):
        between = [uids for prefill, uids in passes[lo + 1 : hi] if not prefill]
        assert len(between) == 1 and {0, 1, 2} <= set(between[0]), (lo, hi, passes[lo:hi])
    short_prefill = next(i for i, (prefill, uids) in enumerate(passes) if prefill and 4 in uids)
    assert short_prefill < chunks[-1] and passes[short_prefill][1] == [4, 3]
    for n, (prompt, params) in enumerate(p for step in sorted(adds) for p in adds[step]):
        alone = play(make_scheduler(tiny_qwen3, monkeypatch, overlap), Script({0: [(prompt,
                                                                                 params)]}))
        assert run.tokens[n] == alone.tokens[0], n
