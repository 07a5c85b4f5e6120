"""The scheduler's side of structured output: requests wait for their grammar, then each step
masks their logits and advances their matchers (chapter 25).

A constrained request goes through three stages here:

1. `submit`: its grammar is compiled on the compiler's thread (compiler.py). The request waits in
   `pending`, outside the prefill queue, so the other requests keep running meanwhile.
2. `ready`: once the compile is done the request gets a GrammarMatcher (the automaton's state for
   this one answer) and the scheduler queues it for prefill.
3. Every step that samples for it: `mask_logits` asks each matcher which tokens may come next, the
   logits of those rows are masked (ops.apply_token_bitmask), and once the token is known
   `accept` moves the matcher past it. A matcher that has reached the grammar's end (it accepted
   the stop token) ends the request with finish_reason "stop".

The order matters under overlap scheduling (chapter 16): the mask of step N+1 depends on the
token of step N, which the host reads only after step N+1 is launched. So a batch holding a
constrained request runs its forward pass at launch, but is sampled only after step N has been
read: the GPU computes step N+1's logits while the host reads step N and fills the mask.
"""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from typing import Any

import torch

from minisgl import ops
from minisgl.core import Req
from minisgl.utils import init_logger

from .compiler import GrammarCompiler
from .spec import GrammarKey, grammar_of, readable

logger = init_logger(__name__)



@dataclass
class _Pending:
    req: Req
    key: GrammarKey
    future: Future[Any]


class GrammarManager:
    def __init__(self, model_path: str, vocab_size: int,
                 stop_token_ids: tuple[int, ...]) -> None:
        self.compiler = GrammarCompiler(model_path, vocab_size, stop_token_ids)
        self.pending: list[_Pending] = []
        self.matchers: dict[int, Any] = {}  # uid -> xgrammar.GrammarMatcher

    def prepare(self) -> None:
        """Build the vocabulary description now, on the compile thread, instead of when the
        first grammar arrives (which then waits for it)."""
        self.compiler.prepare()

    def submit(self, req: Req) -> None:
        key = grammar_of(req.sampling_params)
        assert key is not None
        self.pending.append(_Pending(req, key, self.compiler.compile(key)))

    def ready(self, block: bool) -> list[tuple[Req, str | None]]:
        """Requests whose grammar is compiled, each with None, or the error that ends it.
        block: nothing else to do, so wait a little for the first compile to finish rather
        than spin."""
        if block and self.pending:
            wait([p.future for p in self.pending], timeout=0.05, return_when=FIRST_COMPLETED)
        done = [p for p in self.pending if p.future.done()]
        if not done:
            return []
        self.pending = [p for p in self.pending if not p.future.done()]
        out: list[tuple[Req, str | None]] = []
        for p in done:
            error = p.future.exception()
            if error is not None:
                out.append((p.req, f"cannot compile the {p.key.kind}: {readable(error)}"))
                continue
            import xgrammar as xgr

            self.matchers[p.req.uid] = xgr.GrammarMatcher(p.future.result())
            out.append((p.req, None))
        return out

    def drop(self, uid: int) -> Req | None:
        """Abort a request that is still waiting for its grammar."""
        for p in self.pending:
            if p.req.uid == uid:
                self.pending.remove(p)
                return p.req
        return None

    def forget(self, uid: int) -> None:
        self.matchers.pop(uid, None)

    def constrains(self, reqs: list[Req]) -> bool:
        return bool(self.matchers) and any(r.uid in self.matchers for r in reqs)

    def mask_logits(self, logits: torch.Tensor, reqs: list[Req], skip: set[Req],
                    keep_raw: bool) -> torch.Tensor:
        """The batch's logits [B, V] with each constrained row's forbidden tokens at -inf.
        skip: rows whose token means nothing (a prompt chunk, a request that has just
        finished). keep_raw: some request reports log-probabilities, which come from the raw
        logits, so mask a copy; otherwise mask in place."""
        rows = [i for i, r in enumerate(reqs) if r.uid in self.matchers and r not in skip]
        if not rows:
            return logits
        host = torch.full((len(reqs), (logits.shape[-1] + 31) // 32), -1, dtype=torch.int32,
                          pin_memory=logits.is_cuda)  # -1: every token allowed
        # One row after another. XGrammar's BatchGrammarMatcher fills them on a thread pool,
        # 4x faster on its own, but inside the engine's process its threads fought the others:
        # 3.9 ms per step at batch 16 against 0.3 one by one (H100 host, benchmarks/results/
        # h100_structured_fill.txt).
        for i in rows:
            self.matchers[reqs[i].uid].fill_next_token_bitmask(host, i)
        masked = logits.clone() if keep_raw else logits
        ops.apply_token_bitmask(masked, host.to(logits.device, non_blocking=True))
        return masked

    def accept(self, req: Req, token: int) -> bool:
        """Move the request's matcher past its new token; True when the request must end here
        (the grammar has reached its end)."""
        matcher = self.matchers.get(req.uid)
        if matcher is None:
            return False
        if not matcher.accept_token(token):
            # Cannot happen when the mask was applied; end the request rather than let it
            # write text the grammar does not allow.
            logger.error("request %d: token %d is outside its grammar; ending it", req.uid, token)
            return True
        return matcher.is_terminated()

    def shutdown(self) -> None:
        self.compiler.shutdown()
