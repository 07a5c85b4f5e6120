"""The scheduler as a process: read messages, run one step, send the new tokens (chapter 12).

The loop never sleeps while there is work: it takes whatever messages have arrived without
waiting, runs one step, and sends that step's tokens as one frame. Only an idle scheduler blocks
on its socket, so a new request wakes it at once.

One bad request must fail alone, with an error reply, and never reach a forward pass that it would
break for the whole batch: the scheduler checks each request when it is added (add_request), and a
bug that one request still triggers while being added fails only that request.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

import torch

from minisgl.distributed import init_tp
from minisgl.distributed.comm import TIMEOUT_S
from minisgl.message import (
    AbortMsg,
    ControlMsg,
    ControlReply,
    ReadyMsg,
    TokenOutput,
    UserMsg,
)
from minisgl.message.queues import PullQueue, PushQueue, flush_before_exit
from minisgl.utils import init_logger
from minisgl.utils.mp import setup_worker_process
from minisgl.utils.proctitle import set_process_title

from .config import SchedulerConfig
from .scheduler import Scheduler
from .tp import FollowerLinks, LeaderLink, TPRank, follow, watch_other_nodes

logger = init_logger(__name__)


class SchedulerIO:
    """Connects one Scheduler to its input socket (from the tokenizers) and output socket (to the
    detokenizer): messages become scheduler calls, and each step's outputs go out as one frame.

    With tensor parallelism (chapter 17) rank 0 also sends every message it reads to the other
    ranks (`followers`), and they use only `handle`, without sockets of their own."""

    def __init__(self, scheduler: Scheduler, recv_addr: str | None = None,
                 send_addr: str | None = None) -> None:
        self.scheduler = scheduler
        if recv_addr is not None and send_addr is not None:
            self.recv = PullQueue(recv_addr)
            self.send = PushQueue(send_addr)
        self.followers: FollowerLinks | None = None  # rank 0's links to the other ranks

    def run_forever(self) -> None:
        while True:
            self.run_once(block=not self.scheduler.has_work)

    def run_once(self, block: bool) -> None:
        msgs = self.recv.get_all(block=block)
        if self.followers is not None:  # the other ranks apply the same and step with us
            self.followers.send(msgs)
        replies = self.handle(msgs)
        if self.scheduler.has_work:
            replies += self.scheduler.step()
        self.send.put(replies)

    def handle(self, msgs: list[Any]) -> list[Any]:
        """Apply the arrived messages; the replies that need no forward pass come back."""
        replies: list[Any] = []
        for msg in msgs:
            if isinstance(msg, UserMsg):
                if (refusal := self._admit(msg)) is not None:
                    replies.append(refusal)
            elif isinstance(msg, AbortMsg):
                # A request that already finished is not found: its last reply is on its way.
                if (last := self.scheduler.abort(msg.uid)) is not None:
                    replies.append(last)
            elif isinstance(msg, ControlMsg):
                replies.append(self._control(msg))
            else:
                logger.warning("scheduler: ignoring a %s message", type(msg).__name__)
        return replies

    def _admit(self, msg: UserMsg) -> TokenOutput | None:
        """Queue one request (add_request reports its own refusals in the next step). Only a
        bug that this one request triggers comes back here, as its error reply: it must not
        stop the others. Nothing is allocated while a request is added, so the pool stays whole."""
        try:
            self.scheduler.add_request(msg.input_ids, msg.sampling_params, uid=msg.uid)
        except Exception as e:
            logger.exception("request %d: admission failed", msg.uid)
            self.scheduler.abort(msg.uid)  # in case it got as far as a queue
            return TokenOutput(uid=msg.uid, finished=True, finish_reason="error",
                               error=f"the server could not admit the request "
                                     f"({type(e).__name__})",
                               prompt_tokens=len(msg.input_ids))
        return None

    def _control(self, msg: ControlMsg) -> ControlReply:
        if msg.command == "stats":
            return ControlReply(msg.uid, True, asdict(self.scheduler.stats()))
        if msg.command == "limits":  # what the API server checks requests against
            engine = self.scheduler.engine
            info = {"vocab_size": engine.model_config.vocab_size,
                    "max_seq_len": engine.max_seq_len}
            # >>> ch25
            info["grammar_refusal"] = self.scheduler.grammar_refusal
            # <<< ch25
            return ControlReply(msg.uid, True, info)
        if msg.command == "flush_cache":
            try:
                self.scheduler.flush_cache()
            except RuntimeError as e:  # requests are still running
                return ControlReply(msg.uid, False, error=str(e))
            return ControlReply(msg.uid, True, asdict(self.scheduler.stats()))
        return ControlReply(msg.uid, False, error=f"unknown command {msg.command!r}")


def run_scheduler_process(config: SchedulerConfig, recv_addr: str, send_addr: str,
                          ready_addr: str, tp: TPRank | None = None) -> None:
    """Entry point of a scheduler process (see server/launch.py): rank `tp.rank` of the
    tensor-parallel ranks, or the only one. Rank 0 talks to the tokenizer and the detokenizer."""
    tp = tp or TPRank(0, 1, "", ())
    name = "scheduler" if tp.size == 1 else f"scheduler-rank{tp.rank}"
    # >>> ch27
    if tp.replica is not None:  # one of the --dp-size replicas: scheduler-dp1, scheduler-dp1-rank0
        name = name.replace("scheduler", f"scheduler-dp{tp.replica}")
    # <<< ch27
    setup_worker_process()
    set_process_title(name)
    ready = PushQueue(ready_addr)
    torch.set_grad_enabled(False)
    try:
        config = replace(config, device=tp.device(config.device))
        if tp.rank == 0 and tp.node(tp.size - 1) > 0:  # the other machines' launchers may be late
            logger.info("%s: waiting for the other nodes' ranks at %s (at most %.0f s)", name,
                        tp.init_method, TIMEOUT_S)
        init_tp(tp.rank, tp.size, tp.init_method, config.device)
        scheduler = Scheduler(config)
    except Exception as e:  # whatever stops the model from loading, the launcher must hear it
        ready.put([ReadyMsg(name, error=f"{type(e).__name__}: {e}")])
        flush_before_exit()
        raise SystemExit(1) from e
    if tp.rank > 0:  # a follower: rank 0's messages in, nothing out
        link = LeaderLink(tp.links[tp.rank - 1])
        watch_other_nodes(tp, {0: link.sock})
        ready.put([ReadyMsg(name)])
        follow(scheduler, link, SchedulerIO(scheduler).handle)
        return
    io = SchedulerIO(scheduler, recv_addr, send_addr)
    if tp.size > 1:
        io.followers = FollowerLinks(tp.links)
        watch_other_nodes(tp, io.followers.socks)
    ready.put([ReadyMsg(name)])
    # >>> ch25
    if scheduler.grammar is not None and scheduler.engine.device.type == "cuda":
        # A GPU server builds the vocabulary description now, on the compile thread (8-13 s
        # for Qwen3, holding the GIL much of it), so that the first grammar does not wait for
        # it. Offline LLM runs and CPU servers, where most never ask for a grammar, build it
        # when the first grammar comes.
        scheduler.grammar.prepare()
    # <<< ch25
    with torch.inference_mode():
        io.run_forever()
