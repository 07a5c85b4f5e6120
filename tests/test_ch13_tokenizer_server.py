"""Chapter 13: the tokenizer and detokenizer workers, alone and as real processes."""

from __future__ import annotations

import multiprocessing as mp
import random
import shutil
from dataclasses import dataclass, replace

import pytest
from conftest import CHAT_PROMPTS

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.message import (
    AbortMsg,
    ControlMsg,
    ControlReply,
    ReadyMsg,
    TokenizeMsg,
    TokenOutput,
    UserMsg,
    UserReply,
)
from minisgl.message.queues import PullQueue, PushQueue
from minisgl.scheduler import SchedulerConfig
from minisgl.scheduler.io import run_scheduler_process
from minisgl.tokenizer import load_tokenizer
from minisgl.tokenizer.server import (
    DetokenizeManager,
    detokenize_worker,
    tokenize_request,
    tokenize_worker,
)
from minisgl.utils.mp import ipc_addr, private_ipc_dir

# Text whose tokens split characters: emoji (ZWJ sequences, flags, skin tones), CJK, Korean,
# combining marks, math letters outside the BMP, code, whitespace runs.
TEXTS = [
    "Hello 🌍🚀 world! 👨‍👩‍👧‍👦 family 🇫🇷🇯🇵 👍🏽",
    "北京是中国的首都。東京は日本の首都です。",
    "서울은 한국의 수도입니다. 안녕하세요!",
    "naïve café — “quotes” ½ ∑∫ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 e\u0301 a\u0308",
    "def f(x):\n    return x ** 2  # 平方 ✓\n",
    "  leading spaces,\ttabs\n\n\nand new lines   ",
    "The capital of France is Paris. 2 + 2 = 4; 17 × 23 = 391.",
    "Ελληνικά, русский, العربية, עברית, हिन्दी, ไทย",
]


@pytest.fixture(scope="module")
def tok(smollm2_dir):
    return load_tokenizer(smollm2_dir)


@pytest.fixture
def rng():
    return random.Random()


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(TEXTS) for _ in range(rng.randint(1, 3)))


def random_ids(tok, rng: random.Random) -> list[int]:
    """A random run of a real text's tokens: it may start or end inside a character."""
    ids = tok.encode(random_text(rng), add_special_tokens=False)
    start = rng.randrange(len(ids))
    ids = ids[start : rng.randint(start + 1, len(ids))]
    if rng.random() < 0.3:
        ids.append(rng.choice(tok.eos_token_ids))  # a special token, which the text skips
    return ids


def random_params(rng: random.Random) -> SamplingParams:
    return SamplingParams(temperature=rng.choice([0.0, 0.7]), top_k=rng.choice([-1, 20]),
                          top_p=rng.choice([1.0, 0.9]), ignore_eos=rng.random() < 0.5,
                          max_tokens=rng.randint(1, 4096))


# ---- tokenize_request -------------------------------------------------------------------------


def test_text_is_encoded_with_the_special_tokens(tok, rng):
    for _ in range(20):
        text, params, uid = random_text(rng), random_params(rng), rng.randrange(1 << 40)
        msg = tokenize_request(tok, TokenizeMsg(uid, params, text=text))
        assert msg == UserMsg(uid, tok.encode(text), params)
        assert msg.input_ids == tok.hf.encode(text)


def test_input_ids_are_taken_as_they_are(tok, rng):
    ids = [rng.randrange(len(tok.hf)) for _ in range(rng.randint(1, 100))]
    params = random_params(rng)
    msg = tokenize_request(tok, TokenizeMsg(3, params, input_ids=ids))
    assert msg == UserMsg(3, ids, params)
    assert msg.input_ids is not ids  # a copy


def test_a_chat_is_rendered_by_the_template(tok, rng):
    for _ in range(10):
        chat = [{"role": "user", "content": random_text(rng)}]
        if rng.random() < 0.5:
            chat = [{"role": "system", "content": rng.choice(TEXTS)}, *chat,
                    {"role": "assistant", "content": rng.choice(TEXTS)},
                    {"role": "user", "content": rng.choice(CHAT_PROMPTS)}]
        msg = tokenize_request(tok, TokenizeMsg(5, SamplingParams(), messages=chat))
        assert msg.input_ids == tok.apply_chat_template(chat)
        rendered = tok.hf.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        assert msg.input_ids == tok.hf.encode(rendered, add_special_tokens=False)
        assert tok.decode(msg.input_ids).endswith("<|im_start|>assistant\n")


def test_max_tokens_none_travels_to_the_scheduler_untouched(tok, rng):
    """Only the scheduler knows how much its context and KV pool leave (add_request)."""
    ids = [rng.randrange(len(tok.hf)) for _ in range(rng.randint(1, 300))]
    for params in (random_params(rng), replace(random_params(rng), max_tokens=None)):
        msg = tokenize_request(tok, TokenizeMsg(1, params, input_ids=ids))
        assert msg == UserMsg(1, ids, params)


def test_a_request_without_a_prompt_is_a_value_error(tok):
    with pytest.raises(ValueError, match="needs a prompt"):
        tokenize_request(tok, TokenizeMsg(1, SamplingParams()))


# ---- DetokenizeManager ------------------------------------------------------------------------


def stream_messages(uid: int, ids: list[int], rng: random.Random) -> list[TokenOutput]:
    """How the scheduler sends a request: one token per step; the last step says finished
    (with the last token, or as a separate empty message the way an abort does)."""
    prompt_tokens, cached = rng.randint(1, 500), rng.randint(0, 100)
    msgs = [TokenOutput(uid=uid, token=t, prompt_tokens=prompt_tokens, cached_tokens=cached)
            for t in ids]
    if rng.random() < 0.5:
        msgs[-1] = replace(msgs[-1], finished=True, finish_reason=rng.choice(["stop", "length"]))
    else:
        msgs.append(TokenOutput(uid=uid, finished=True, finish_reason="abort",
                                prompt_tokens=prompt_tokens, cached_tokens=cached))
    return msgs


def test_streamed_text_equals_one_shot_decode(tok, rng):
    for _ in range(200):
        ids = random_ids(tok, rng)
        manager = DetokenizeManager(tok)
        msgs = stream_messages(7, ids, rng)
        replies = [manager.process(m) for m in msgs]
        want = tok.decode(ids, skip_special_tokens=True)
        assert "".join(r.text for r in replies) == want
        if "\ufffd" not in want:  # the run starts and ends on whole characters
            assert all("\ufffd" not in r.text for r in replies)  # halves were held back
        for msg, reply in zip(msgs, replies):
            assert (reply.uid, reply.token, reply.finished, reply.finish_reason,
                    reply.error, reply.prompt_tokens, reply.cached_tokens) == \
                (msg.uid, msg.token, msg.finished, msg.finish_reason, msg.error,
                 msg.prompt_tokens, msg.cached_tokens)
        assert manager.streams == {}  # forgotten after its finished message


def test_a_finished_uid_starts_fresh_if_it_comes_back(tok, rng):
    manager = DetokenizeManager(tok)
    first, second = random_ids(tok, rng), random_ids(tok, rng)
    for ids in (first, second):
        text = "".join(manager.process(m).text for m in stream_messages(1, ids, rng))
        assert text == tok.decode(ids, skip_special_tokens=True)
        assert 1 not in manager.streams


def test_interleaved_requests_do_not_mix(tok, rng):
    manager = DetokenizeManager(tok)
    streams = {uid: random_ids(tok, rng) for uid in rng.sample(range(1 << 40), 6)}
    pending = {uid: stream_messages(uid, ids, rng) for uid, ids in streams.items()}
    texts = dict.fromkeys(streams, "")
    while pending:
        uid = rng.choice(list(pending))
        reply = manager.process(pending[uid].pop(0))
        assert reply.uid == uid
        texts[uid] += reply.text
        if not pending[uid]:
            del pending[uid]
            assert uid not in manager.streams
        else:
            assert uid in manager.streams
    for uid, ids in streams.items():
        assert texts[uid] == tok.decode(ids, skip_special_tokens=True)
    assert manager.streams == {}


def test_an_error_with_no_tokens_passes_through(tok):
    manager = DetokenizeManager(tok)
    reply = manager.process(TokenOutput(uid=9, finished=True, finish_reason="error",
                                        error="too long", prompt_tokens=300))
    assert reply == UserReply(uid=9, finished=True, finish_reason="error", error="too long",
                              prompt_tokens=300, text="")
    assert manager.streams == {}


def test_tokens_that_cannot_be_decoded_fail_that_request_alone(tok, rng):
    """Ids the tokenizer cannot decode (negative, beyond 64 bits of its range) end their own
    request with one error reply; its later messages are dropped until its last one, and a
    request interleaved with it decodes as if nothing happened."""
    for bad in (-rng.randrange(1, 1 << 40), (1 << 64) + rng.randrange(1 << 20)):
        manager = DetokenizeManager(tok)
        ok_ids, bad_ids = random_ids(tok, rng), random_ids(tok, rng)
        bad_ids.insert(rng.randrange(len(bad_ids) + 1), bad)
        ok_msgs, bad_msgs = stream_messages(1, ok_ids, rng), stream_messages(2, bad_ids, rng)
        order = [1] * len(ok_msgs) + [2] * len(bad_msgs)
        rng.shuffle(order)
        replies = [manager.process((ok_msgs if uid == 1 else bad_msgs).pop(0)) for uid in order]
        mine = [r for r in replies if r is not None and r.uid == 2]
        # the pieces before the bad id, then one error reply that ends the request
        assert len(mine) == bad_ids.index(bad) + 1
        assert [r.finished for r in mine] == [False] * (len(mine) - 1) + [True]
        assert mine[-1].finish_reason == "error" and "cannot detokenize" in mine[-1].error
        assert "".join(r.text for r in replies if r is not None and r.uid == 1) == \
            tok.decode(ok_ids, skip_special_tokens=True)
        assert manager.streams == {} and manager.failed == set()


# ---- the three processes ----------------------------------------------------------------------

CONTEXT = 512
MAX_TOKENS = 24


@dataclass
class Server:
    procs: list
    to_tokenizer: PushQueue
    frontend: PullQueue

    def collect(self, done) -> list:
        got: list = []
        while not done(got):
            for proc in self.procs:
                assert proc.is_alive(), f"{proc.name} exited with code {proc.exitcode}"
            got += self.frontend.get(timeout=0.5)
        return got


def finished(uids):
    uids = set(uids)
    return lambda got: uids <= {m.uid for m in got if isinstance(m, UserReply) and m.finished}


@pytest.fixture(scope="module")
def server(smollm2_dir):
    path = str(smollm2_dir)
    folder = private_ipc_dir()
    addr = {name: ipc_addr(folder, name)
            for name in ("tokenizer-0", "scheduler", "detokenizer", "frontend", "ready")}
    ready, frontend = PullQueue(addr["ready"]), PullQueue(addr["frontend"])
    to_tokenizer = PushQueue(addr["tokenizer-0"])
    config = SchedulerConfig(model_path=path, num_pages=1024, max_seq_len=CONTEXT)
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=run_scheduler_process, name="scheduler", daemon=True,
                    args=(config, addr["scheduler"], addr["detokenizer"], addr["ready"])),
        ctx.Process(target=tokenize_worker, name="tokenizer-0", daemon=True,
                    args=(path, addr["tokenizer-0"], addr["scheduler"], addr["frontend"],
                          addr["ready"], "tokenizer-0")),
        ctx.Process(target=detokenize_worker, name="detokenizer", daemon=True,
                    args=(path, addr["detokenizer"], addr["frontend"], addr["ready"])),
    ]
    try:
        for proc in procs:
            proc.start()
        waiting = {proc.name for proc in procs}
        while waiting:
            for msg in ready.get(timeout=0.5):
                assert isinstance(msg, ReadyMsg) and msg.error is None, msg
                waiting.discard(msg.name)
            for proc in procs:
                assert proc.is_alive(), f"{proc.name} exited with code {proc.exitcode}"
        yield Server(procs, to_tokenizer, frontend)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            if proc.pid is not None:
                proc.join(30)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for q in (ready, frontend, to_tokenizer):
            q.close()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def llm(smollm2_dir):
    llm = LLM(str(smollm2_dir), device="cpu", num_pages=1024)
    yield llm
    llm.shutdown()


def test_streamed_text_equals_llm_generate(server, llm, tok, rng):
    questions = rng.sample(CHAT_PROMPTS, 2)
    chats = [[{"role": "user", "content": q}] for q in questions]
    completion = rng.choice(TEXTS)  # a text prompt, no template
    prompts = [tok.apply_chat_template(c) for c in chats] + [tok.encode(completion)]
    want = llm.generate(prompts, SamplingParams(max_tokens=MAX_TOKENS), use_tqdm=False)
    uids = rng.sample(range(1 << 40), 3)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    server.to_tokenizer.put([TokenizeMsg(uids[0], params, messages=chats[0]),
                             TokenizeMsg(uids[1], params, messages=chats[1]),
                             TokenizeMsg(uids[2], params, text=completion)])
    got = server.collect(finished(uids))
    for uid, prompt, result in zip(uids, prompts, want):
        replies = [m for m in got if m.uid == uid]
        assert all(isinstance(m, UserReply) for m in replies)
        ids = [m.token for m in replies if m.token is not None]
        assert ids == result["token_ids"]
        assert "".join(m.text for m in replies) == tok.decode(ids, skip_special_tokens=True)
        assert "".join(m.text for m in replies) == result["text"]
        assert [m.finished for m in replies] == [False] * (len(replies) - 1) + [True]
        assert replies[-1].finish_reason == result["finish_reason"]
        assert all(m.prompt_tokens == len(prompt) for m in replies)


def test_bad_requests_are_answered_by_the_tokenizer_worker(server, rng):
    uids = rng.sample(range(1 << 40), 4)
    params = SamplingParams(max_tokens=8)
    server.to_tokenizer.put([
        TokenizeMsg(uids[0], params),  # no prompt at all
        TokenizeMsg(uids[1], params, messages=[]),  # the template refuses an empty chat
        TokenizeMsg(uids[2], params, messages=[{"role": "user"}]),  # no content
        TokenizeMsg(uids[3], params, messages=[{"role": "user", "content": 5}]),
    ])
    got = server.collect(finished(uids))
    assert sorted(m.uid for m in got) == sorted(uids)  # one reply each, nothing else
    for reply in got:
        assert isinstance(reply, UserReply)
        assert reply.finished and reply.finish_reason == "error"
        assert reply.error.startswith("cannot tokenize the request")  # the tokenizer's words
        assert reply.token is None and reply.text == "" and reply.prompt_tokens == 0


def test_a_prompt_longer_than_the_context_is_the_schedulers_error(server, tok, rng):
    text = " ".join(rng.choice(TEXTS) for _ in range(200))
    n = len(tok.encode(text))
    assert n > CONTEXT
    uid = rng.randrange(1 << 40)
    # max_tokens None leaves no room at all: the scheduler explains what is wrong
    server.to_tokenizer.put([TokenizeMsg(uid, SamplingParams(max_tokens=None), text=text)])
    (reply,) = server.collect(finished([uid]))
    assert reply.finish_reason == "error" and reply.prompt_tokens == n
    assert f"context length of {CONTEXT} tokens" in reply.error


def test_abort_and_stats_travel_behind_the_request(server, tok, rng):
    uid, probe = rng.sample(range(1 << 40), 2)
    chat = [{"role": "user", "content": rng.choice(CHAT_PROMPTS)}]
    server.to_tokenizer.put([TokenizeMsg(uid, SamplingParams(max_tokens=300, ignore_eos=True),
                                         messages=chat)])
    got = server.collect(lambda got: len(got) >= 2)  # it is decoding
    server.to_tokenizer.put([AbortMsg(uid), ControlMsg(probe, "stats")])
    got += server.collect(lambda got: any(isinstance(m, ControlReply) for m in got))
    replies = [m for m in got if isinstance(m, UserReply)]
    assert all(m.uid == uid for m in replies)
    assert [m.finished for m in replies].count(True) == 1 and replies[-1].finished
    assert replies[-1].finish_reason == "abort"
    assert len([m.token for m in replies if m.token is not None]) < 300
    (stats,) = [m for m in got if isinstance(m, ControlReply)]
    assert stats.uid == probe and stats.ok
    assert stats.info["running_requests"] == 0 and stats.info["request_pages"] == 0
