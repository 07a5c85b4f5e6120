"""The scheduler as a process: read messages, run one step, send the new tokens (chapter 12).

The loop never sleeps while there is work: it takes whatever messages have arrived without
waiting, runs one step, and sends that step's tokens as one frame. Only an idle scheduler blocks
on its socket, so a new request wakes it at once.

A request is checked again at admission (token ids inside the vocabulary, sampling parameters the
sampler can compute) even though the API server validates it first: one bad request must fail
alone, with an error reply, and never reach a forward pass that it would break for the whole batch.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from minisgl.core import SamplingParams
from minisgl.message import (
    AbortMsg,
    ControlMsg,
    ControlReply,
    DetokenizeMsg,
    ReadyMsg,
    UserMsg,
)
from minisgl.utils import init_logger
from minisgl.utils.mp import PullQueue, PushQueue, flush_before_exit, setup_worker_process

from .config import SchedulerConfig
from .scheduler import Scheduler, TokenOutput

logger = init_logger(__name__)

# Below this, dividing fp32 logits by the temperature can overflow to inf (and softmax to NaN);
# the API server treats such temperatures as greedy, as the sampler's argmax would pick anyway.
MIN_TEMPERATURE = 1e-5


class SchedulerIO:
    """Connects one Scheduler to its input socket (from the tokenizers) and output socket (to the
    detokenizer), translating messages into scheduler calls and step outputs into messages."""

    def __init__(self, scheduler: Scheduler, recv_addr: str, send_addr: str) -> None:
        self.scheduler = scheduler
        self.recv = PullQueue(recv_addr)
        self.send = PushQueue(send_addr)
        self._prompt_lens: dict[int, int] = {}  # uid -> prompt length, for the usage counts

    def run_forever(self) -> None:
        while True:
            self.run_once(block=not self.scheduler.has_work)

    def run_once(self, block: bool) -> None:
        replies = self.handle(self.recv.get_all(block=block))
        if self.scheduler.has_work:
            replies += [self._reply(out) for out in self.scheduler.step()]
        self.send.put(replies)

    def handle(self, msgs: list[Any]) -> list[Any]:
        """Apply the arrived messages; the replies that need no forward pass come back."""
        replies: list[Any] = []
        for msg in msgs:
            if isinstance(msg, UserMsg):
                error = self._admit(msg)
                if error is not None:
                    logger.warning("request %d refused: %s", msg.uid, error)
                    replies.append(DetokenizeMsg(msg.uid, finished=True, finish_reason="error",
                                                 error=error,
                                                 prompt_tokens=self._prompt_lens.pop(msg.uid, 0)))
            elif isinstance(msg, AbortMsg):
                # A request that already finished is not found: its last reply is on its way.
                if self.scheduler.abort(msg.uid):
                    replies.append(DetokenizeMsg(msg.uid, finished=True, finish_reason="abort",
                                                 prompt_tokens=self._prompt_lens.pop(msg.uid, 0)))
            elif isinstance(msg, ControlMsg):
                replies.append(self._control(msg))
            else:
                logger.warning("scheduler: ignoring a %s message", type(msg).__name__)
        return replies

    def _admit(self, msg: UserMsg) -> str | None:
        """Queue one request; why it cannot run, if it cannot. Nothing is allocated before
        add_request has accepted it, so a refused request leaves the KV pool as it was."""
        self._prompt_lens[msg.uid] = len(msg.input_ids)
        try:
            error = self._check_request(msg)
            if error is not None:
                return error
            params = msg.sampling_params
            if msg.fit_max_tokens:
                params = self._fit(params, len(msg.input_ids))
            self.scheduler.add_request(msg.input_ids, params, uid=msg.uid)
        except Exception as e:  # a bug that one request triggers must not stop the others
            logger.exception("request %d: admission failed", msg.uid)
            self.scheduler.abort(msg.uid)  # frees whatever it may hold
            return f"the server could not admit the request ({type(e).__name__})"
        return None

    def _check_request(self, msg: UserMsg) -> str | None:
        vocab = self.scheduler.engine.model_config.vocab_size
        bad = next((i for i in msg.input_ids if not 0 <= i < vocab), None)
        if bad is not None:
            return f"token id {bad} is outside the vocabulary [0, {vocab})"
        p = msg.sampling_params
        if not (p.top_k == -1 or 1 <= p.top_k <= vocab):
            return f"top_k must be -1 (off) or in [1, {vocab}], got {p.top_k}"
        if not (p.temperature == 0 or MIN_TEMPERATURE <= p.temperature < math.inf):
            return f"temperature must be 0 or in [{MIN_TEMPERATURE}, inf), got {p.temperature}"
        return None

    def _fit(self, params: SamplingParams, prompt_len: int) -> SamplingParams:
        """max_tokens lowered to what the context and the whole KV pool leave after the prompt.
        At least 1, so a prompt that fills the context still gets add_request's clear error."""
        room = min(self.scheduler.engine.max_seq_len, self.scheduler.cache.capacity_tokens)
        return replace(params, max_tokens=min(params.max_tokens, max(1, room - prompt_len)))

    def _reply(self, out: TokenOutput) -> DetokenizeMsg:
        # Every reply carries the prompt length, so a frontend that stops early still knows it.
        lens = self._prompt_lens
        prompt_tokens = lens.pop(out.uid, 0) if out.finished else lens.get(out.uid, 0)
        return DetokenizeMsg(out.uid, [] if out.token is None else [out.token], out.finished,
                             out.finish_reason, out.error, prompt_tokens, out.cached_tokens)

    def _control(self, msg: ControlMsg) -> ControlReply:
        if msg.command == "stats":
            return ControlReply(msg.uid, True, memory_stats(self.scheduler))
        if msg.command == "limits":  # what the API server checks requests against
            engine = self.scheduler.engine
            return ControlReply(msg.uid, True, {"vocab_size": engine.model_config.vocab_size,
                                                "max_seq_len": engine.max_seq_len})
        if msg.command == "flush_cache":
            try:
                self.scheduler.flush_cache()
            except RuntimeError as e:  # requests are still running
                return ControlReply(msg.uid, False, error=str(e))
            return ControlReply(msg.uid, True, memory_stats(self.scheduler))
        return ControlReply(msg.uid, False, error=f"unknown command {msg.command!r}")


def memory_stats(scheduler: Scheduler) -> dict[str, int]:
    """Where the KV pages are: free, kept by the prefix cache, or held by live requests."""
    cache, page = scheduler.cache, scheduler.engine.page_size
    free = cache.free_tokens // page
    cached = (cache.prefix_cache.evictable_size + cache.prefix_cache.protected_size) // page
    return {
        "total_pages": cache.num_pages,
        "free_pages": free,
        "cached_pages": cached,
        "request_pages": cache.num_pages - free - cached,
        "running_requests": len(scheduler.decode.running),
        "waiting_requests": len(scheduler.prefill.waiting),
    }


def run_scheduler_process(config: SchedulerConfig, eos_token_ids: tuple[int, ...],
                          recv_addr: str, send_addr: str, ready_addr: str) -> None:
    """Entry point of the scheduler process (see server/launch.py)."""
    setup_worker_process()
    ready = PushQueue(ready_addr)
    torch.set_grad_enabled(False)
    try:
        scheduler = Scheduler(config, eos_token_ids=eos_token_ids)
    except Exception as e:  # whatever stops the model from loading, the launcher must hear it
        ready.put([ReadyMsg("scheduler", error=f"{type(e).__name__}: {e}")])
        flush_before_exit()
        raise SystemExit(1) from e
    io = SchedulerIO(scheduler, recv_addr, send_addr)
    ready.put([ReadyMsg("scheduler")])
    with torch.inference_mode():
        io.run_forever()
