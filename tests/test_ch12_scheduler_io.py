"""Chapter 12: the scheduler behind its sockets (SchedulerIO), checked against LLM.generate."""

from __future__ import annotations

import multiprocessing as mp
import random
import shutil
import signal
from collections.abc import Callable
from dataclasses import asdict
from types import SimpleNamespace

import pytest
from conftest import CHAT_PROMPTS

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.message import AbortMsg, ControlMsg, ControlReply, ReadyMsg, TokenOutput, UserMsg
from minisgl.message.queues import PullQueue, PushQueue
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.scheduler.io import SchedulerIO, run_scheduler_process
from minisgl.utils.mp import ipc_addr, private_ipc_dir

MAX_TOKENS = 24
NUM_PAGES = 384
CONTEXT = 256  # max_seq_len of the scheduler under test, so "too long" is cheap to build


@pytest.fixture(scope="module")
def reference(smollm2_dir):
    """uid-free expectations: chat prompt ids and LLM.generate's greedy answers to them."""
    llm = LLM(str(smollm2_dir), device="cpu", num_pages=512)
    prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": p}])
               for p in CHAT_PROMPTS[:3]]
    results = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS), use_tqdm=False)
    llm.shutdown()
    return prompts, results


class InProcess:
    """A SchedulerIO run by the test itself, holding the queues the other processes would hold:
    the tokenizer's PushQueue into the scheduler and the detokenizer's PullQueue out of it."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.folder = private_ipc_dir()
        scheduler_addr = ipc_addr(self.folder, "scheduler")
        detokenizer_addr = ipc_addr(self.folder, "detokenizer")
        self.out = PullQueue(detokenizer_addr)  # what the detokenizer binds
        self.io = SchedulerIO(scheduler, scheduler_addr, detokenizer_addr)
        self.to_scheduler = PushQueue(scheduler_addr)  # what a tokenizer worker connects

    def send(self, *msgs) -> None:
        self.to_scheduler.put(list(msgs))

    def pump(self, done: Callable[[list], bool]) -> list:
        """Run the scheduler loop until the messages that came out satisfy `done`."""
        got: list = []
        for _ in range(100_000):  # a guard against a hang, never reached when things work
            if done(got):
                return got
            self.io.run_once(block=False)
            if self.io.scheduler.has_work:
                got += self.out.get_all(block=False)
            else:  # idle: let in-flight frames (ours or its replies) arrive
                got += self.out.get(timeout=0.05)
        raise AssertionError(f"the scheduler never finished; got {got}")

    def close(self) -> None:
        for q in (self.to_scheduler, self.out, self.io.recv, self.io.send):
            q.close()
        shutil.rmtree(self.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def in_process(smollm2_dir):
    config = SchedulerConfig(model_path=str(smollm2_dir), num_pages=NUM_PAGES, max_seq_len=CONTEXT)
    env = InProcess(Scheduler(config))
    yield env
    env.close()
    env.io.scheduler.shutdown()


@pytest.fixture
def sched(in_process):
    """The shared scheduler; whatever a failed test left running is aborted afterwards."""
    yield in_process
    scheduler = in_process.io.scheduler
    for req in [*scheduler.decode.running, *scheduler.prefill.waiting]:
        scheduler.abort(req.uid)
    while scheduler.has_work:
        scheduler.step()
    while in_process.out.get(timeout=0.05):
        pass


@pytest.fixture
def rng():
    return random.Random()


def finished(uids) -> Callable[[list], bool]:
    uids = set(uids)
    return lambda got: uids <= {m.uid for m in got if isinstance(m, TokenOutput) and m.finished}


def control_reply(uid: int) -> Callable[[list], bool]:
    return lambda got: any(isinstance(m, ControlReply) and m.uid == uid for m in got)


def of(got: list, uid: int) -> list[TokenOutput]:
    return [m for m in got if isinstance(m, TokenOutput) and m.uid == uid]


def tokens(msgs: list[TokenOutput]) -> list[int]:
    return [m.token for m in msgs if m.token is not None]


def memory_stats(scheduler: Scheduler) -> dict[str, int]:
    return asdict(scheduler.stats())


def assert_idle(sched: InProcess) -> dict[str, int]:
    stats = memory_stats(sched.io.scheduler)
    assert stats["request_pages"] == 0
    assert stats["running_requests"] == stats["waiting_requests"] == 0
    assert stats["free_pages"] + stats["cached_pages"] == stats["total_pages"] == NUM_PAGES
    sched.io.scheduler.check_integrity()
    return stats


def test_greedy_tokens_over_the_sockets_equal_llm_generate(sched, reference, rng):
    prompts, results = reference
    uids = rng.sample(range(1 << 40), len(prompts))
    params = SamplingParams(max_tokens=MAX_TOKENS)
    sched.send(*[UserMsg(uid, ids, params) for uid, ids in zip(uids, prompts)])
    got = sched.pump(finished(uids))
    assert all(isinstance(m, TokenOutput) for m in got)
    for uid, ids, want in zip(uids, prompts, results):
        msgs = of(got, uid)
        assert tokens(msgs) == want["token_ids"]
        assert all(m.token is not None for m in msgs)  # one message per new token
        assert [m.finished for m in msgs] == [False] * (len(msgs) - 1) + [True]
        assert msgs[-1].finish_reason == want["finish_reason"]
        assert all(m.prompt_tokens == len(ids) for m in msgs)
        assert all(m.error is None for m in msgs)
    assert "Paris" in results[0]["text"]
    assert_idle(sched)


def test_requests_in_separate_frames_join_the_running_batch(sched, reference, rng):
    prompts, results = reference
    uids = rng.sample(range(1 << 40), len(prompts))
    params = SamplingParams(max_tokens=MAX_TOKENS)
    sched.send(UserMsg(uids[0], prompts[0], params))
    got = sched.pump(lambda got: len(of(got, uids[0])) >= 2)  # the first one is decoding
    for uid, ids in zip(uids[1:], prompts[1:]):
        sched.send(UserMsg(uid, ids, params))
    got += sched.pump(finished(uids))
    for uid, want in zip(uids, results):
        assert tokens(of(got, uid)) == want["token_ids"]
    assert_idle(sched)


def test_abort_of_a_running_request_frees_its_pages(sched, reference, rng):
    prompts, _ = reference
    uid = rng.randrange(1 << 40)
    sched.send(UserMsg(uid, prompts[1], SamplingParams(max_tokens=200, ignore_eos=True)))
    got = sched.pump(lambda got: len(of(got, uid)) >= 3)
    running = memory_stats(sched.io.scheduler)
    assert running["running_requests"] == 1 and running["request_pages"] > 0
    sched.send(AbortMsg(uid))
    got += sched.pump(finished([uid]))
    ends = [m for m in of(got, uid) if m.finished]
    assert len(ends) == 1
    assert ends[0].finish_reason == "abort" and ends[0].token is None
    assert ends[0].prompt_tokens == len(prompts[1])
    assert len(tokens(of(got, uid))) < 200
    stats = assert_idle(sched)
    assert stats["free_pages"] > running["free_pages"]
    # a second abort of the same uid, now finished, says nothing
    probe = rng.randrange(1 << 40)
    sched.send(AbortMsg(uid), ControlMsg(probe, "stats"))
    assert [type(m) for m in sched.pump(control_reply(probe))] == [ControlReply]


def test_abort_of_a_waiting_request_sends_one_abort_and_no_tokens(sched, reference, rng):
    prompts, _ = reference
    uid, probe = rng.sample(range(1 << 40), 2)
    sched.send(UserMsg(uid, prompts[2], SamplingParams(max_tokens=MAX_TOKENS)), AbortMsg(uid),
               ControlMsg(probe, "stats"))
    got = sched.pump(control_reply(probe))
    assert of(got, uid) == [TokenOutput(uid=uid, finished=True, finish_reason="abort",
                                        prompt_tokens=len(prompts[2]))]
    assert_idle(sched)


def test_abort_of_an_unknown_or_finished_uid_produces_nothing(sched, reference, rng):
    prompts, results = reference
    uid, unknown, probe = rng.sample(range(1 << 40), 3)
    sched.send(UserMsg(uid, prompts[0], SamplingParams(max_tokens=4)))
    got = sched.pump(finished([uid]))
    assert tokens(of(got, uid)) == results[0]["token_ids"][:4]
    sched.send(AbortMsg(uid), AbortMsg(unknown), ControlMsg(probe, "stats"))
    got = sched.pump(control_reply(probe))
    assert len(got) == 1 and got[0].ok  # only the stats answer
    assert_idle(sched)


def test_stats_while_running_and_when_idle(sched, reference, rng):
    prompts, _ = reference
    uid, q1, q2, q3 = rng.sample(range(1 << 40), 4)
    sched.send(UserMsg(uid, prompts[0], SamplingParams(max_tokens=100, ignore_eos=True)))
    sched.pump(lambda got: len(of(got, uid)) >= 2)
    sched.send(ControlMsg(q1, "stats"), ControlMsg(q2, "flush_cache"))
    got = sched.pump(lambda got: control_reply(q1)(got) and control_reply(q2)(got))
    replies = {m.uid: m for m in got if isinstance(m, ControlReply)}
    info = replies[q1].info
    assert replies[q1].ok and replies[q1].error is None
    assert info["total_pages"] == NUM_PAGES
    assert info["total_pages"] == info["free_pages"] + info["cached_pages"] + info["request_pages"]
    assert info["running_requests"] == 1 and info["request_pages"] > 0
    # the radix cache took over the prompt's pages after prefill (protected while it runs)
    assert info["request_pages"] + info["cached_pages"] >= len(prompts[0])
    # the cache cannot be flushed under a running request
    assert not replies[q2].ok and "requests hold pages" in replies[q2].error
    sched.send(AbortMsg(uid), ControlMsg(q3, "stats"))
    got = sched.pump(control_reply(q3))
    info = next(m for m in got if isinstance(m, ControlReply)).info
    assert info["request_pages"] == 0 and info["running_requests"] == 0
    assert info["total_pages"] == info["free_pages"] + info["cached_pages"]


def test_flush_cache_when_idle_frees_every_page(sched, reference, rng):
    prompts, _ = reference
    uid, q1, q2 = rng.sample(range(1 << 40), 3)
    sched.send(UserMsg(uid, prompts[1], SamplingParams(max_tokens=4)), ControlMsg(q1, "stats"))
    sched.pump(lambda got: finished([uid])(got) and control_reply(q1)(got))
    assert assert_idle(sched)["cached_pages"] > 0  # the radix cache keeps the prompt
    sched.send(ControlMsg(q2, "flush_cache"))
    reply = sched.pump(control_reply(q2))[0]
    assert reply.ok and reply.error is None
    assert reply.info["free_pages"] == reply.info["total_pages"] == NUM_PAGES
    assert reply.info["cached_pages"] == 0
    assert memory_stats(sched.io.scheduler) == reply.info


@pytest.mark.parametrize("command", ["", "STATS", "shutdown", "stats "])
def test_an_unknown_command_is_not_ok(sched, rng, command):
    uid = rng.randrange(1 << 40)
    sched.send(ControlMsg(uid, command))
    (reply,) = sched.pump(control_reply(uid))
    assert reply == ControlReply(uid, False, {}, f"unknown command {command!r}")


def test_a_request_longer_than_the_context_gets_an_error(sched, reference, rng):
    prompts, results = reference
    long = [rng.randrange(100, 40_000) for _ in range(rng.randint(CONTEXT + 1, CONTEXT + 100))]
    almost = [rng.randrange(100, 40_000) for _ in range(CONTEXT - 5)]  # fits, not with 24 more
    ok, bad, worse, empty = rng.sample(range(1 << 40), 4)
    sched.send(UserMsg(bad, long, SamplingParams(max_tokens=1)),
               UserMsg(ok, prompts[0], SamplingParams(max_tokens=MAX_TOKENS)),
               UserMsg(worse, almost, SamplingParams(max_tokens=MAX_TOKENS)),
               UserMsg(empty, [], SamplingParams()))
    got = sched.pump(finished([ok, bad, worse, empty]))
    for uid, prompt_len in ((bad, len(long)), (worse, len(almost))):
        assert of(got, uid) == [TokenOutput(uid=uid, finished=True, finish_reason="error",
                                            error=of(got, uid)[0].error, prompt_tokens=prompt_len)]
        assert f"context length of {CONTEXT} tokens" in of(got, uid)[0].error
    assert of(got, empty)[0].finish_reason == "error" and "empty" in of(got, empty)[0].error
    assert tokens(of(got, ok)) == results[0]["token_ids"]  # the good request is unharmed
    assert_idle(sched)


def test_max_tokens_none_runs_to_the_end_of_the_context(sched, rng):
    prompt = [rng.randrange(100, 40_000) for _ in range(rng.randint(CONTEXT - 30, CONTEXT - 2))]
    uid = rng.randrange(1 << 40)
    params = SamplingParams(max_tokens=None, ignore_eos=True)  # "as long as it can go"
    sched.send(UserMsg(uid, prompt, params))
    got = of(sched.pump(finished([uid])), uid)
    assert got[-1].finish_reason == "length"
    assert len(tokens(got)) == CONTEXT - len(prompt)
    assert_idle(sched)


def test_add_request_decides_max_tokens_against_the_context_and_the_pool(rng):
    """The KV pool, not only the context, bounds a request: a pool of 100 tokens under a
    context of 256 leaves 100 - prompt tokens. None is fitted to that room, an explicit limit is
    kept or refused, and a prompt with no room left is refused with the reason."""
    for _ in range(200):
        pool, context = rng.randint(20, 400), rng.randint(20, 400)
        prompt, asked = [7] * rng.randint(1, 450), rng.choice([None, rng.randint(1, 500)])
        fake = Scheduler.__new__(Scheduler)  # add_request's own logic, without a model
        fake.engine = SimpleNamespace(max_seq_len=context,
                                      model_config=SimpleNamespace(vocab_size=100))
        fake.cache = SimpleNamespace(capacity_tokens=pool)
        queued = []
        fake.prefill, fake._early_outputs, fake._next_uid = SimpleNamespace(add=queued.append), [], 0
        fake.add_request(prompt, SamplingParams(temperature=0.5, max_tokens=asked))
        room = min(pool, context) - len(prompt)
        want = room if asked is None else asked
        if 0 < want <= room:
            (req,) = queued
            assert req.sampling_params.max_tokens == want and fake._early_outputs == []
            assert req.sampling_params.temperature == 0.5
        else:
            (out,) = fake._early_outputs
            assert queued == [] and out.finish_reason == "error" and out.finished
            assert ("context length" in out.error) == (len(prompt) + max(want, 1) > context)
            assert out.prompt_tokens == len(prompt)


def test_a_message_the_scheduler_does_not_take_is_ignored(sched, rng):
    uid = rng.randrange(1 << 40)
    sched.send(ReadyMsg("stray"), TokenOutput(uid=uid, token=1), ControlMsg(uid, "stats"))
    got = sched.pump(control_reply(uid))
    assert [type(m) for m in got] == [ControlReply]
    assert_idle(sched)


def test_the_scheduler_process(smollm2_dir, reference):
    """run_scheduler_process in a real spawned process: ready report, one request, SIGTERM."""
    prompts, results = reference
    folder = private_ipc_dir()
    scheduler_addr, detokenizer_addr, ready_addr = (ipc_addr(folder, name) for name in
                                                    ("scheduler", "detokenizer", "ready"))
    ready, out = PullQueue(ready_addr), PullQueue(detokenizer_addr)  # bound before the start
    to_scheduler = PushQueue(scheduler_addr)
    config = SchedulerConfig(model_path=str(smollm2_dir), num_pages=256)
    proc = mp.get_context("spawn").Process(
        target=run_scheduler_process, name="scheduler", daemon=True,
        args=(config, scheduler_addr, detokenizer_addr, ready_addr))
    proc.start()
    try:
        msgs: list = []
        while not msgs:
            assert proc.is_alive(), f"the scheduler exited with code {proc.exitcode}"
            msgs = ready.get(timeout=0.5)
        assert msgs == [ReadyMsg("scheduler")]
        uid = random.randrange(1 << 40)
        to_scheduler.put([UserMsg(uid, prompts[0], SamplingParams(max_tokens=MAX_TOKENS))])
        got: list = []
        while not finished([uid])(got):
            assert proc.is_alive(), f"the scheduler exited with code {proc.exitcode}"
            got += out.get(timeout=0.5)
        assert tokens(of(got, uid)) == results[0]["token_ids"]
        assert all(m.prompt_tokens == len(prompts[0]) for m in got)
        proc.terminate()  # SIGTERM: the kernel ends the worker at once (its default action)
        proc.join(60)
        assert not proc.is_alive()
        assert proc.exitcode == -signal.SIGTERM
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        for q in (ready, out, to_scheduler):
            q.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_scheduler_that_cannot_load_reports_why(tmp_path):
    folder = private_ipc_dir()
    ready_addr = ipc_addr(folder, "ready")
    ready = PullQueue(ready_addr)
    config = SchedulerConfig(model_path=str(tmp_path / "no-model"), num_pages=16)
    proc = mp.get_context("spawn").Process(
        target=run_scheduler_process, daemon=True,
        args=(config, ipc_addr(folder, "s"), ipc_addr(folder, "d"), ready_addr))
    proc.start()
    try:
        msgs: list = []
        while not msgs and proc.is_alive():
            msgs = ready.get(timeout=0.5)
        msgs += ready.get(timeout=0.5)  # the report may land just as the process exits
        assert len(msgs) == 1 and msgs[0].name == "scheduler" and msgs[0].error
        proc.join(60)
        assert proc.exitcode == 1
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
        ready.close()
        shutil.rmtree(folder, ignore_errors=True)


def test_a_request_the_engine_cannot_run_fails_alone(sched, reference, rng):
    """Second line of defence behind the API's checks: ids outside the vocabulary (too big,
    negative), a top_k beyond it and a temperature too small to divide by each get an error
    reply at admission, while good requests sent in the same frame run to LLM.generate's answer
    and the KV pool ends whole."""
    prompts, results = reference
    vocab = sched.io.scheduler.engine.model_config.vocab_size
    good = prompts[0]
    bad = {
        "id = vocab": (good[:-1] + [vocab + rng.randrange(1000)], SamplingParams(max_tokens=4)),
        "negative id": ([-rng.randrange(1, 1 << 62)] + good, SamplingParams(max_tokens=4)),
        "top_k 2^63": (good, SamplingParams(temperature=1.0, top_k=(1 << 63) + rng.randrange(9),
                                            max_tokens=4)),
        "top_k vocab + 1": (good, SamplingParams(temperature=1.0, top_k=vocab + 1, max_tokens=4)),
        "temperature 1e-300": (good, SamplingParams(temperature=1e-300, max_tokens=4)),
    }
    uids = rng.sample(range(1 << 40), len(bad) + 2)
    good_uids, bad_uids = uids[:2], dict(zip(bad, uids[2:]))
    msgs = [UserMsg(uid, ids, params) for uid, (ids, params) in zip(bad_uids.values(),
                                                                    bad.values())]
    msgs.insert(rng.randrange(len(msgs) + 1), UserMsg(good_uids[0], good,
                                                      SamplingParams(max_tokens=MAX_TOKENS)))
    msgs.append(UserMsg(good_uids[1], good, SamplingParams(max_tokens=MAX_TOKENS)))
    sched.send(*msgs)
    got = sched.pump(finished(uids))
    for name, uid in bad_uids.items():
        (reply,) = of(got, uid)
        assert reply.finished and reply.finish_reason == "error" and reply.token is None, name
        assert reply.error and reply.prompt_tokens == len(bad[name][0]), name
    for uid in good_uids:
        assert tokens(of(got, uid)) == results[0]["token_ids"]
    assert_idle(sched)
