"""The tokenizer and detokenizer worker processes (chapter 13).

Tokenizing a long prompt or rendering a chat template takes milliseconds of Python; doing it in the
scheduler would stall every running request for that long, and doing it in the API server would
stall every connection. So text work has processes of its own: `--num-tokenizer` tokenizer
workers turn requests into token ids, and one detokenizer turns each step's new tokens back into
text pieces. There is one detokenizer because each request's streaming state (see detokenize.py)
must live in one place.

Each worker isolates requests from each other: a request that cannot be tokenized (a chat the
template refuses) or detokenized gets an error reply and the worker goes on with the others. A
tokenized request is sent on at once, so a long prompt does not hold back the short ones that
arrived with it.
"""

from __future__ import annotations

from typing import Any

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
from minisgl.message.dp import ReplicaQueues
from minisgl.message.queues import PullQueue, PushQueue, flush_before_exit
from minisgl.utils import init_logger
from minisgl.utils.mp import setup_worker_process
from minisgl.utils.proctitle import set_process_title

from .detokenize import IncrementalDetokenizer
from .tokenize import Tokenizer, load_tokenizer

logger = init_logger(__name__)


def tokenize_request(tokenizer: Tokenizer, msg: TokenizeMsg) -> UserMsg:
    """The token ids of one request."""
    if msg.messages is not None:
        ids = tokenizer.apply_chat_template(msg.messages)
    elif msg.text is not None:
        ids = tokenizer.encode(msg.text)
    elif msg.input_ids is not None:
        ids = list(msg.input_ids)
    else:
        raise ValueError("a request needs a prompt, token ids or chat messages")
    out = UserMsg(msg.uid, ids, msg.sampling_params)
    # >>> ch27
    out.dp_rank = msg.dp_rank  # the replica the frontend chose (chapter 27)
    # <<< ch27
    return out


def tokenize_worker(model_dir: str, recv_addr: str, backend_addr: str, frontend_addr: str,
                    ready_addr: str, name: str = "tokenizer",
                    # >>> ch27
                    more_replicas: tuple[str, ...] = (),
                    # <<< ch27
                    ) -> None:
    """Entry point of a tokenizer process: requests in, token ids out to the scheduler."""
    setup_worker_process()
    # >>> ch14
    set_process_title(name)
    # <<< ch14
    ready = PushQueue(ready_addr)
    tokenizer = _load_or_report(model_dir, ready, name)
    recv, to_backend, to_frontend = PullQueue(recv_addr), PushQueue(backend_addr), \
        PushQueue(frontend_addr)
    # >>> ch27
    # --dp-size replicas (chapter 27): backend_addr is replica 0's, more_replicas the others';
    # each message goes to the replica its dp_rank names
    to_backend = ReplicaQueues([to_backend, *map(PushQueue, more_replicas)])
    # <<< ch27
    ready.put([ReadyMsg(name)])
    while True:
        for msg in recv.get_all(block=True):
            if isinstance(msg, TokenizeMsg):
                try:
                    to_backend.put([tokenize_request(tokenizer, msg)])
                except Exception as e:  # a bad chat (say, roles the template refuses)
                    to_frontend.put([UserReply(uid=msg.uid, finished=True, finish_reason="error",
                                               error=f"cannot tokenize the request: {e}")])
            elif isinstance(msg, (AbortMsg, ControlMsg)):
                to_backend.put([msg])  # same socket as the request, so it arrives after it
            else:
                logger.warning("%s: ignoring a %s message", name, type(msg).__name__)


class DetokenizeManager:
    """One streaming decoder per live request; a request's state goes when it finishes.

    A request whose tokens cannot be decoded is failed alone: it gets one error reply (the
    frontend then aborts it in the scheduler), and its later messages are dropped until its last
    one arrives."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.streams: dict[int, IncrementalDetokenizer] = {}
        self.failed: set[int] = set()

    def process(self, msg: TokenOutput) -> UserReply | None:
        """The reply to send, or None for a message of a request that has already failed."""
        if msg.uid in self.failed:
            if msg.finished:
                self.failed.discard(msg.uid)
            return None
        try:
            return self._decode(msg)
        except Exception as e:
            logger.exception("request %d: cannot detokenize", msg.uid)
            self.streams.pop(msg.uid, None)
            if not msg.finished:
                self.failed.add(msg.uid)
            return UserReply(uid=msg.uid, finished=True, finish_reason="error",
                             error=f"cannot detokenize the answer ({type(e).__name__})",
                             prompt_tokens=msg.prompt_tokens)

    def _decode(self, msg: TokenOutput) -> UserReply:
        stream = self.streams.get(msg.uid)
        if stream is None:
            stream = self.streams[msg.uid] = self.tokenizer.detokenizer()
        text = stream.feed(msg.token) if msg.token is not None else ""
        if msg.finished:
            text += stream.finish()
            del self.streams[msg.uid]
        # >>> ch16
        if msg.logprob is not None and msg.token is not None:
            ids = [msg.token, *(msg.top_ids or [])]
            return UserReply.of(msg, text, token_texts=[
                self.tokenizer.decode([i], skip_special_tokens=False) for i in ids])
        # <<< ch16
        return UserReply.of(msg, text)


def detokenize_worker(model_dir: str, recv_addr: str, frontend_addr: str, ready_addr: str) -> None:
    """Entry point of the detokenizer process: each step's tokens in, text pieces out."""
    setup_worker_process()
    # >>> ch14
    set_process_title("detokenizer")
    # <<< ch14
    ready = PushQueue(ready_addr)
    manager = DetokenizeManager(_load_or_report(model_dir, ready, "detokenizer"))
    recv, to_frontend = PullQueue(recv_addr), PushQueue(frontend_addr)
    ready.put([ReadyMsg("detokenizer")])
    while True:
        replies: list[Any] = []
        for msg in recv.get_all(block=True):
            if isinstance(msg, TokenOutput):
                if (reply := manager.process(msg)) is not None:
                    replies.append(reply)
            elif isinstance(msg, ControlReply):
                replies.append(msg)
            else:
                logger.warning("detokenizer: ignoring a %s message", type(msg).__name__)
        to_frontend.put(replies)


def _load_or_report(model_dir: str, ready: PushQueue, name: str) -> Tokenizer:
    try:
        return load_tokenizer(model_dir)
    except Exception as e:
        ready.put([ReadyMsg(name, error=f"{type(e).__name__}: {e}")])
        flush_before_exit()
        raise SystemExit(1) from e
