"""Chapter 12: the msgpack message codec and the ZeroMQ queues between processes."""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import random
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minisgl.core import SamplingParams
from minisgl.message import (
    AbortMsg,
    ControlMsg,
    ControlReply,
    MessageError,
    ReadyMsg,
    TokenizeMsg,
    TokenOutput,
    UserMsg,
    UserReply,
    codec,
    decode,
    encode,
    message,
)
from minisgl.message.queues import AsyncPullQueue, PullQueue, PushQueue
from minisgl.utils.mp import ipc_addr, private_ipc_dir, process_start_time, remove_stale_ipc_dirs

SETTINGS = settings(max_examples=150, deadline=None, database=None)

# ---- random messages --------------------------------------------------------------------------

uids = st.integers(0, 2**63 - 1)
token = st.integers(0, 2**31 - 1)
token_ids = st.lists(token, max_size=40)
texts = st.text(max_size=30)  # any code point but surrogates: emoji, CJK, NUL, newlines...
maybe_text = st.none() | texts
reasons = st.sampled_from([None, "stop", "length", "abort", "error"])
counts = st.integers(0, 1 << 40)
keys = texts.filter(lambda k: k != codec._TYPE_KEY)
json_like = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=8,
)
params = st.builds(
    SamplingParams,
    temperature=st.floats(0, 4, allow_nan=False),
    top_k=st.just(-1) | st.integers(1, 1 << 20),
    top_p=st.floats(0, 1, exclude_min=True),
    ignore_eos=st.booleans(),
    max_tokens=st.none() | st.integers(1, 1 << 30),
)
chat = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": texts},
    optional={"name": texts, "extra": json_like}), max_size=4)

STRATEGIES = {
    SamplingParams: params,
    UserMsg: st.builds(UserMsg, uids, token_ids, params),
    TokenizeMsg: st.builds(TokenizeMsg, uids, params, maybe_text, st.none() | token_ids,
                           st.none() | chat),
    AbortMsg: st.builds(AbortMsg, uids),
    ControlMsg: st.builds(ControlMsg, uids, texts),
    TokenOutput: st.builds(TokenOutput, uid=uids, token=st.none() | token, finished=st.booleans(),
                           finish_reason=reasons, error=maybe_text, prompt_tokens=counts,
                           cached_tokens=counts),
    UserReply: st.builds(UserReply, uid=uids, token=st.none() | token, finished=st.booleans(),
                         finish_reason=reasons, error=maybe_text, prompt_tokens=counts,
                         cached_tokens=counts, text=texts),
    ControlReply: st.builds(ControlReply, uids, st.booleans(),
                            st.dictionaries(keys, st.integers(-(2**63), 2**63 - 1), max_size=6),
                            maybe_text),
    ReadyMsg: st.builds(ReadyMsg, texts, maybe_text),
}
any_message = st.one_of(*STRATEGIES.values())


def test_every_registered_type_is_covered_here():
    assert set(codec._REGISTRY) == {cls.__name__ for cls in STRATEGIES}


@SETTINGS
@given(st.lists(any_message, max_size=8))
def test_round_trip_of_random_messages(msgs):
    frame = encode(msgs)
    assert isinstance(frame, bytes)
    back = decode(frame)
    assert back == msgs
    assert [type(m) for m in back] == [type(m) for m in msgs]


@SETTINGS
@given(STRATEGIES[UserMsg], STRATEGIES[TokenizeMsg])
def test_nested_sampling_params_survive(user, tok):
    got_user, got_tok = decode(encode([user, tok]))
    for got, sent in ((got_user, user), (got_tok, tok)):
        assert type(got.sampling_params) is SamplingParams
        assert got.sampling_params == sent.sampling_params
        assert got.sampling_params.is_greedy == sent.sampling_params.is_greedy


def test_empty_frame_and_a_whole_decode_step_in_one_frame():
    assert decode(encode([])) == []
    rng = random.Random()
    step = [TokenOutput(uid=uid, token=rng.randrange(50_000), prompt_tokens=rng.randint(1, 900))
            for uid in rng.sample(range(10**6), 200)]
    assert decode(encode(step)) == step


# ---- what decode refuses ----------------------------------------------------------------------

_ran: list[str] = []


def _mark(what: str) -> None:
    _ran.append(what)


class _Evil:
    def __reduce__(self):
        return _mark, ("code chosen by the sender",)


def test_a_pickle_frame_is_refused_and_runs_nothing():
    evil = pickle.dumps([_Evil()])
    with pytest.raises(MessageError):
        decode(evil)
    assert _ran == []
    pickle.loads(evil)  # what unpickling would have done: run the sender's function
    assert _ran == ["code chosen by the sender"]
    _ran.clear()
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        with pytest.raises(MessageError):
            decode(pickle.dumps([AbortMsg(1)], protocol=protocol))


def test_random_garbage_is_refused():
    rng = random.Random()
    for _ in range(300):
        with pytest.raises(MessageError):
            decode(rng.randbytes(rng.randint(16, 200)))
    for frame in (b"", b"\xc1", b"\x91", encode([AbortMsg(3)])[:-1], encode([AbortMsg(3)]) + b"\0"):
        with pytest.raises(MessageError):
            decode(frame)


@pytest.mark.parametrize("value", [{"_type": "AbortMsg", "uid": 1}, 5, "AbortMsg", None, b"x"])
def test_a_frame_that_is_not_a_list_is_refused(value):
    with pytest.raises(MessageError, match="must be a list"):
        decode(msgpack.packb(value))


@pytest.mark.parametrize("item", [1, "AbortMsg", [], {"uid": 1}, None])
def test_a_list_item_that_is_not_a_message_is_refused(item):
    with pytest.raises(MessageError, match="expected a message"):
        decode(msgpack.packb([{"_type": "AbortMsg", "uid": 1}, item]))


@pytest.mark.parametrize("name", ["Evil", "abortmsg", "Scheduler", "__class__", "", 7, None])
def test_an_unknown_type_name_is_refused(name):
    with pytest.raises(MessageError, match="unknown message type"):
        decode(msgpack.packb([{"_type": name, "uid": 1}]))


def test_an_unknown_field_is_refused():
    with pytest.raises(MessageError, match="no field"):
        decode(msgpack.packb([{"_type": "AbortMsg", "uid": 1, "command": "rm -rf /"}]))
    wire = msgpack.unpackb(encode([UserMsg(1, [5], SamplingParams())]))
    wire[0]["sampling_params"]["colour"] = 3  # a field no chapter has
    with pytest.raises(MessageError, match="no field"):
        decode(msgpack.packb(wire))


def test_a_missing_required_field_is_refused():
    with pytest.raises(MessageError, match="bad AbortMsg"):
        decode(msgpack.packb([{"_type": "AbortMsg"}]))
    wire = msgpack.unpackb(encode([UserMsg(1, [5], SamplingParams())]))
    del wire[0]["input_ids"]
    with pytest.raises(MessageError, match="bad UserMsg"):
        decode(msgpack.packb(wire))
    # fields with a default may be left out
    assert decode(msgpack.packb([{"_type": "TokenOutput", "uid": 4}])) == [TokenOutput(uid=4)]


@pytest.mark.parametrize("field,value", [("temperature", -1.0), ("temperature", math.nan),
                                         ("temperature", "hot"), ("top_k", 0), ("top_p", 0.0),
                                         ("top_p", 1.5), ("max_tokens", 0)])
@pytest.mark.parametrize("cls", [UserMsg, TokenizeMsg])
def test_invalid_sampling_params_inside_a_message_are_refused(cls, field, value):
    msg = UserMsg(1, [5, 6], SamplingParams()) if cls is UserMsg else \
        TokenizeMsg(1, SamplingParams(), text="hi")
    wire = msgpack.unpackb(encode([AbortMsg(0), msg]))
    wire[1]["sampling_params"][field] = value
    with pytest.raises(MessageError, match="bad SamplingParams"):
        decode(msgpack.packb(wire))


# ---- what encode refuses ----------------------------------------------------------------------


@dataclass
class Unregistered:
    uid: int


def test_encoding_an_unregistered_dataclass_raises_type_error():
    with pytest.raises(TypeError, match="not a registered"):
        encode([Unregistered(1)])
    with pytest.raises(TypeError, match="not a registered"):  # also nested inside a message
        encode([ControlReply(1, True, info={"x": Unregistered(2)})])

    @dataclass
    class AbortMsg:  # same name as a registered type, but another class
        uid: int

    with pytest.raises(TypeError, match="not a registered"):
        encode([AbortMsg(1)])


def test_registering_needs_a_dataclass_with_a_new_name():
    with pytest.raises(TypeError, match="must be a dataclass"):
        message(type("NotADataclass", (), {}))

    @dataclass
    class UserMsg:
        uid: int

    with pytest.raises(TypeError, match="two message types"):
        message(UserMsg)
    assert set(codec._REGISTRY) == {cls.__name__ for cls in STRATEGIES}


def test_a_plain_dict_with_the_type_key_cannot_be_encoded():
    # It would decode as a message instead of coming back as the dict that was sent.
    sneaky = TokenizeMsg(1, SamplingParams(), messages=[{"_type": "AbortMsg", "uid": 9}])
    with pytest.raises(TypeError, match="_type"):
        encode([sneaky])


# ---- the ZeroMQ queues ------------------------------------------------------------------------


@pytest.fixture
def ipc_dir():
    folder = private_ipc_dir()
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_private_ipc_folder_is_only_for_this_user(ipc_dir):
    assert ipc_dir.is_dir()
    assert stat.S_IMODE(os.stat(ipc_dir).st_mode) == 0o700
    assert ipc_dir.stat().st_uid == os.getuid()
    other = private_ipc_dir()
    try:
        assert other != ipc_dir and stat.S_IMODE(os.stat(other).st_mode) == 0o700
    finally:
        other.rmdir()
    addr = ipc_addr(ipc_dir, "scheduler")
    assert addr == f"ipc://{ipc_dir}/scheduler"
    pull = PullQueue(addr)  # binding creates the socket file inside the folder
    try:
        assert (ipc_dir / "scheduler").exists()
    finally:
        pull.close()


def test_the_folder_name_records_its_owner():
    folder = private_ipc_dir()
    try:
        pid, started = folder.name.split("-")[1:3]
        assert int(pid) == os.getpid() and int(started) == process_start_time(os.getpid()) > 0
        assert folder.parent == Path(tempfile.gettempdir())
    finally:
        folder.rmdir()


def _dead_pid() -> int:
    """The pid of a process that has exited (it could be reused later, but not within a test)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_stale_ipc_folders_are_removed_and_live_ones_kept(tmp_path):
    """A folder whose launcher is gone goes (dead pid; live pid but another start time: the pid
    was reused); a live launcher's folder, a name that says no owner and a folder of another
    user stay."""
    me, started = os.getpid(), process_start_time(os.getpid())
    rng = random.Random()

    def folder(name: str) -> Path:
        path = tmp_path / name
        path.mkdir(mode=0o700)
        (path / "scheduler").write_bytes(b"")  # as if a socket file were inside
        return path

    stale = [folder(f"minisgl-{_dead_pid()}-{rng.randrange(1, 1 << 40)}-a1"),
             folder(f"minisgl-{_dead_pid()}-0-b2"),
             folder(f"minisgl-{me}-{started + rng.randrange(1, 1000)}-c3")]
    kept = [folder(f"minisgl-{me}-{started}-d4"), folder("minisgl-e5"),
            folder(f"minisgl-{me}x-{started}-f6"), folder("other-123-456-g7")]
    if os.getuid() == 0:  # root can give a folder away: another user's stale folder stays
        other = folder(f"minisgl-{_dead_pid()}-1-h8")
        os.chown(other, 65534, 65534)
        kept.append(other)
    assert sorted(remove_stale_ipc_dirs(tmp_path)) == sorted(stale)
    assert not any(p.exists() for p in stale) and all(p.is_dir() for p in kept)
    assert remove_stale_ipc_dirs(tmp_path) == []


def _random_frames(rng: random.Random, n: int) -> list[list]:
    kinds = [lambda i: AbortMsg(i),
             lambda i: TokenOutput(uid=i, token=rng.choice([None, rng.randrange(50_000)])),
             lambda i: UserMsg(i, [rng.randrange(50_000) for _ in range(rng.randint(1, 50))],
                               SamplingParams(max_tokens=rng.randint(1, 99)))]
    frames, uid = [], 0
    for _ in range(n):
        frame = []
        for _ in range(rng.randint(1, 4)):
            frame.append(rng.choice(kinds)(uid))
            uid += 1
        frames.append(frame)
    return frames


def _receive(pull: PullQueue, count: int) -> list:
    got: list = []
    while len(got) < count:
        msgs = pull.get(timeout=60)
        assert msgs, "nothing arrived"  # a guard against hanging, not a timing check
        got += msgs
    return got


def test_1000_frames_from_one_sender_arrive_in_order(ipc_dir):
    addr = ipc_addr(ipc_dir, "in")
    pull, push = PullQueue(addr), PushQueue(addr)
    try:
        frames = _random_frames(random.Random(), 1000)
        for frame in frames:
            push.put(frame)
        sent = [m for frame in frames for m in frame]
        assert _receive(pull, len(sent)) == sent
        assert pull.get(timeout=0.05) == []  # nothing extra, nothing doubled
    finally:
        push.close()
        pull.close()


def test_two_senders_each_keep_their_order(ipc_dir):
    addr = ipc_addr(ipc_dir, "in")
    pull = PullQueue(addr)
    pushes = [PushQueue(addr), PushQueue(addr)]
    rng = random.Random()
    sent: dict[int, list[int]] = {0: [], 1: []}
    try:
        for i in range(400):
            who = rng.randrange(2)
            sent[who].append(i)
            pushes[who].put([ControlMsg(i, f"sender-{who}")])
        got = _receive(pull, 400)
        for who in (0, 1):
            assert [m.uid for m in got if m.command == f"sender-{who}"] == sent[who]
    finally:
        for push in pushes:
            push.close()
        pull.close()


def test_the_asyncio_pull_queue_keeps_frames_whole_and_in_order(ipc_dir):
    addr = ipc_addr(ipc_dir, "frontend")
    frames = _random_frames(random.Random(), 50)

    async def receive() -> list[list]:
        pull = AsyncPullQueue(addr)
        push = PushQueue(addr)
        try:
            for frame in frames:
                push.put(frame)
            return [await asyncio.wait_for(pull.get(), 60) for _ in frames]
        finally:
            push.close()
            pull.close()

    assert asyncio.run(receive()) == frames


def test_get_with_a_timeout_returns_an_empty_list(ipc_dir):
    pull = PullQueue(ipc_addr(ipc_dir, "quiet"))
    try:
        assert pull.get(timeout=0.05) == []
        assert pull.get(timeout=0) == []
        assert pull.get_all(block=False) == []
    finally:
        pull.close()


def test_an_empty_put_sends_no_frame(ipc_dir):
    addr = ipc_addr(ipc_dir, "in")
    pull, push = PullQueue(addr), PushQueue(addr)
    try:
        push.put([])
        push.put([AbortMsg(5)])
        assert pull.get(timeout=60) == [AbortMsg(5)]  # not the empty list before it
    finally:
        push.close()
        pull.close()


def test_get_all_drains_every_waiting_frame():
    # inproc hands a frame to the receiver's pipe inside send, so all three are waiting when
    # get_all runs (over ipc the last ones might still be in flight).
    addr = f"inproc://drain-{random.getrandbits(64)}"
    pull, push = PullQueue(addr), PushQueue(addr)
    try:
        frames = _random_frames(random.Random(), 3)
        for frame in frames:
            push.put(frame)
        assert pull.get_all(block=True) == [m for frame in frames for m in frame]
        assert pull.get_all(block=False) == []
    finally:
        push.close()
        pull.close()


def test_a_corrupt_frame_on_the_socket_raises_message_error(ipc_dir):
    import zmq

    addr = ipc_addr(ipc_dir, "in")
    pull = PullQueue(addr)
    raw = zmq.Context.instance().socket(zmq.PUSH)
    raw.setsockopt(zmq.LINGER, 0)
    raw.connect(addr)
    try:
        raw.send(pickle.dumps([AbortMsg(1)]))
        with pytest.raises(MessageError):
            pull.get(timeout=60)
    finally:
        raw.close()
        pull.close()
