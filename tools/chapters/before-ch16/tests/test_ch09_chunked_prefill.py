"""Chapter 9: a long prompt prefilled in chunks gives the same tokens as HF greedy, and its
chunks alternate with the running requests' decode steps instead of holding them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from test_ch03_models import save_random_hf_model
from test_ch08_scheduler import make_scheduler, run_all

from minisgl.core import SamplingParams, TokenOutput
from minisgl.scheduler import Scheduler, SchedulerConfig

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
    assert first_token_step[short_uid] == 1  # shared the first prefill batch with a chunk
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


# --- Interleaving: a long prompt's chunks alternate with the running requests' decode steps ---
# A tiny random Qwen3 keeps these cheap. The tests record the order of events (forward passes
# and the tokens that step() returns) and assert on that order, never on time.

TINY_VOCAB = 320  # tests/test_ch03_models.py's TINY config
BUDGET = 32  # max_prefill_length of these tests: a 200-token prompt takes 7 chunks


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3")
    save_random_hf_model(path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         head_dim=16, num_hidden_layers=2)
    return path


def tiny_scheduler(model_dir, **overrides) -> Scheduler:
    config = dict(model_path=str(model_dir), page_size=4, num_pages=256, max_running_reqs=16,
                  seed=0, max_prefill_length=BUDGET)
    return Scheduler(SchedulerConfig(**{**config, **overrides}))


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(0, TINY_VOCAB, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@dataclass
class Forward:
    """One forward pass: prefill or decode, and how many new tokens each request computed."""

    prefill: bool
    extend: dict[int, int]  # uid -> new tokens, in batch order


class Timeline:
    """Steps a scheduler and records, in order, every forward pass and every token output."""

    def __init__(self, sched: Scheduler) -> None:
        self.sched = sched
        self.events: list[Forward | TokenOutput] = []
        inner = sched.engine.forward_batch

        def forward_batch(batch):
            self.events.append(Forward(batch.is_prefill,
                                       {r.uid: r.extend_len for r in batch.reqs}))
            return inner(batch)

        sched.engine.forward_batch = forward_batch

    def step(self) -> None:
        self.events += self.sched.step()
        self.sched.check_integrity()
        assert len(self.events) < 5000, "the scheduler does not finish"

    def run(self) -> None:
        while self.sched.has_work:
            self.step()

    def chunks(self, uid: int) -> list[int]:
        """Indices of the prefill passes that computed part of this request's prompt."""
        return [i for i, e in enumerate(self.events)
                if isinstance(e, Forward) and e.prefill and uid in e.extend]

    def decodes(self, uid: int, lo: int, hi: int) -> int:
        """Decode passes of this request between event indices lo and hi."""
        return sum(isinstance(e, Forward) and not e.prefill and uid in e.extend
                   for e in self.events[lo:hi])

    def tokens(self, uid: int, until: int | None = None) -> list[int]:
        return [e.token for e in self.events[:until]
                if isinstance(e, TokenOutput) and e.uid == uid and e.token is not None]

    def first_token_at(self, uid: int) -> int:
        return next(i for i, e in enumerate(self.events)
                    if isinstance(e, TokenOutput) and e.uid == uid)


def alone(model_dir, ids: list[int], max_tokens: int) -> list[int]:
    """The request's greedy tokens when it runs by itself: what interleaving must not change."""
    timeline = Timeline(tiny_scheduler(model_dir))
    uid = timeline.sched.add_request(ids, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    timeline.run()
    return timeline.tokens(uid)


def assert_decode_between_chunks(timeline: Timeline, long_uid: int, running: list[int]) -> None:
    """Each gap between two chunks of the long prompt holds one decode step of every running
    request, and the running requests' token counts grow while the long prompt is prefilled."""
    chunks = timeline.chunks(long_uid)
    assert len(chunks) > 2
    for lo, hi in zip(chunks, chunks[1:]):
        for uid in running:
            assert timeline.decodes(uid, lo, hi) == 1, (uid, lo, hi)
    for uid in running:
        assert len(timeline.tokens(uid, chunks[-1])) > len(timeline.tokens(uid, chunks[0]))


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(max_tokens=max_tokens, ignore_eos=True)


def test_a_running_request_decodes_between_the_chunks_of_a_long_prompt(tiny_qwen3):
    """The defect: an 8k-token prompt held every running request until all its chunks ran."""
    timeline = Timeline(tiny_scheduler(tiny_qwen3))
    short_ids, long_ids = random_ids(10, 1), random_ids(200, 2)
    short = timeline.sched.add_request(short_ids, greedy(40))
    timeline.step()  # prefill of the short request
    timeline.step()  # one decode step: it is running
    long = timeline.sched.add_request(long_ids, greedy(5))
    timeline.run()
    assert len(timeline.chunks(long)) == -(-200 // BUDGET)  # 7 chunks, each one prefill pass
    assert_decode_between_chunks(timeline, long, [short])
    assert timeline.tokens(short) == alone(tiny_qwen3, short_ids, 40)
    assert timeline.tokens(long) == alone(tiny_qwen3, long_ids, 5)


def test_several_running_requests_and_a_short_one_arriving_mid_prefill(tiny_qwen3):
    """Three requests run; a long prompt arrives; after its second chunk a short prompt arrives.
    The short one starts in the next prefill batch, ahead of the long prompt's chunk, and gets
    its first token before the long prompt's last chunk (not after the whole long prompt)."""
    timeline = Timeline(tiny_scheduler(tiny_qwen3))
    prompts = {n: random_ids(6 + 3 * n, 10 + n) for n in range(3)}
    running = [timeline.sched.add_request(ids, greedy(30)) for ids in prompts.values()]
    timeline.step()
    long_ids, late_ids = random_ids(200, 3), random_ids(8, 4)
    long = timeline.sched.add_request(long_ids, greedy(4))
    while len(timeline.chunks(long)) < 2:
        timeline.step()
    late = timeline.sched.add_request(late_ids, greedy(6))
    timeline.run()
    chunks = timeline.chunks(long)
    assert_decode_between_chunks(timeline, long, running)
    late_prefill = timeline.chunks(late)
    assert len(late_prefill) == 1 and chunks[1] < late_prefill[0] < chunks[-1]
    batch = timeline.events[late_prefill[0]]
    assert list(batch.extend) == [late, long]  # it went ahead of the long prompt's next chunk
    assert batch.extend[late] + batch.extend[long] <= BUDGET
    assert timeline.first_token_at(late) < chunks[-1]
    assert timeline.first_token_at(late) < timeline.first_token_at(long)
    for uid, ids in zip(running, prompts.values()):
        assert timeline.tokens(uid) == alone(tiny_qwen3, ids, 30)
    assert timeline.tokens(late) == alone(tiny_qwen3, late_ids, 6)
    assert timeline.tokens(long) == alone(tiny_qwen3, long_ids, 4)


def test_two_long_prompts_and_a_stream_of_short_ones(tiny_qwen3):
    """Two long prompts arrive together while a request runs, and a short prompt arrives at
    every step. The running request decodes between every two chunks of either long prompt;
    the second long prompt (too long to go ahead) waits behind the first; the short prompts go
    ahead but never take more than half of a batch, so the long prompts still progress."""
    timeline = Timeline(tiny_scheduler(tiny_qwen3, num_pages=512))
    first_ids = random_ids(12, 5)
    first = timeline.sched.add_request(first_ids, greedy(60))
    timeline.step()
    long_ids = [random_ids(160, 6), random_ids(120, 7)]
    longs = [timeline.sched.add_request(ids, greedy(3)) for ids in long_ids]
    shorts: dict[int, list[int]] = {}
    while len(timeline.chunks(longs[1])) == 0 or timeline.sched.prefill.waiting:
        ids = random_ids(5, 100 + len(shorts))
        shorts[timeline.sched.add_request(ids, greedy(2))] = ids
        timeline.step()
        assert len(shorts) < 100, "the long prompts starve"
    timeline.run()
    a, b = (timeline.chunks(uid) for uid in longs)
    assert a[-1] <= b[0]  # the second long prompt waited for the first: arrival order
    assert_decode_between_chunks(timeline, longs[0], [first])
    assert_decode_between_chunks(timeline, longs[1], [first])
    for uid in longs:  # a first chunk takes what is left; a part-way prompt at least half
        sizes = [timeline.events[i].extend[uid] for i in timeline.chunks(uid)]
        assert all(size >= BUDGET // 2 for size in sizes[1:-1]), sizes
    assert any(len(timeline.events[i].extend) > 1 for i in a[1:])  # short ones went ahead
    assert timeline.tokens(first) == alone(tiny_qwen3, first_ids, 60)
    for uid, ids in zip(longs, long_ids):
        assert timeline.tokens(uid) == alone(tiny_qwen3, ids, 3)
    for uid, ids in list(shorts.items())[::7]:
        assert timeline.tokens(uid) == alone(tiny_qwen3, ids, 2)


def test_a_short_prompt_that_does_not_fit_beside_a_part_way_prompt_waits(tiny_qwen3):
    """Nothing runs, the part-way prompt holds most of the pool and the short prompt behind it
    does not fit: the long prompt goes on (no deadlock), then the short one runs."""
    long_ids, short_ids = random_ids(100, 8), random_ids(14, 9)
    timeline = Timeline(tiny_scheduler(tiny_qwen3, num_pages=27))  # 108 slots
    long = timeline.sched.add_request(long_ids, greedy(4))
    for _ in range(3):
        timeline.step()  # 96 of its 100 tokens are in the pool: 12 slots are left, not 14
    short = timeline.sched.add_request(short_ids, greedy(4))
    timeline.run()
    assert timeline.chunks(long)[-1] < timeline.chunks(short)[0]
    assert timeline.tokens(long) == alone(tiny_qwen3, long_ids, 4)
    assert timeline.tokens(short) == alone(tiny_qwen3, short_ids, 4)


def test_the_default_budget_keeps_a_cpu_step_short():
    """8192 tokens in one prefill step held every running request for minutes on a CPU."""
    def budget(**kwargs) -> int:
        return SchedulerConfig(model_path="unused", **kwargs).max_prefill_length

    assert budget() == budget(device="cpu") == 512
    assert budget(device="cuda") == budget(device="cuda:1") == 8192  # as the official engine
    assert budget(device="cpu", max_prefill_length=8192) == 8192  # the flag still overrides
