"""The scheduler as a process: read messages, run one step, send the new tokens (chapter 12).

The loop never sleeps while there is work: it takes whatever messages have arrived without
waiting, runs one step, and sends that step's tokens as one frame. Only an idle scheduler blocks
on its socket, so a new request wakes it at once.

One bad request must fail alone, with an error reply, and never reach a forward pass that it would
break for the whole batch: the scheduler checks each request when it is added (add_request), and a
bug that one request still triggers while being added fails only that request.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

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

logger = init_logger(__name__)


class SchedulerIO:
    """Connects one Scheduler to its input socket (from the tokenizers) and output socket (to the
    detokenizer): messages become scheduler calls, and each step's outputs go out as one frame."""

    def __init__(self, scheduler: Scheduler, recv_addr: str, send_addr: str) -> None:
        self.scheduler = scheduler
        self.recv = PullQueue(recv_addr)
        self.send = PushQueue(send_addr)

    def run_forever(self) -> None:
        while True:
            self.run_once(block=not self.scheduler.has_work)

    def run_once(self, block: bool) -> None:
        replies = self.handle(self.recv.get_all(block=block))
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
            return ControlReply(msg.uid, True, {"vocab_size": engine.model_config.vocab_size,
                                                "max_seq_len": engine.max_seq_len})
        if msg.command == "flush_cache":
            try:
                self.scheduler.flush_cache()
            except RuntimeError as e:  # requests are still running
                return ControlReply(msg.uid, False, error=str(e))
            return ControlReply(msg.uid, True, asdict(self.scheduler.stats()))
        return ControlReply(msg.uid, False, error=f"unknown command {msg.command!r}")


def run_scheduler_process(config: SchedulerConfig, recv_addr: str, send_addr: str,
                          ready_addr: str) -> None:
    """Entry point of the scheduler process (see server/launch.py)."""
    setup_worker_process()
    # >>> ch14
    set_process_title("scheduler")
    # <<< ch14
    ready = PushQueue(ready_addr)
    torch.set_grad_enabled(False)
    try:
        scheduler = Scheduler(config)
    except Exception as e:  # whatever stops the model from loading, the launcher must hear it
        ready.put([ReadyMsg("scheduler", error=f"{type(e).__name__}: {e}")])
        flush_before_exit()
        raise SystemExit(1) from e
    io = SchedulerIO(scheduler, recv_addr, send_addr)
    ready.put([ReadyMsg("scheduler")])
    with torch.inference_mode():
        io.run_forever()
