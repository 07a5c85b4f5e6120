"""Proposals from a small draft model (chapter 24, STANDALONE).

The draft model has the target's tokenizer and runs k greedy decode steps ahead of it. It is an
Engine of its own (weights, KV pool, attention backend, CUDA graphs on a GPU), built with two
differences: its pool has as many pages as the target's, and it uses the target's page table. A
token's draft K/V then lives in the same slot of the draft pool as its target K/V in the target
pool, so the draft needs no allocator: the slots a request owns in the target are the ones it
may write in the draft, and they are freed together (the page-ownership checks cover both).

The draft only remembers, per request, how many leading tokens it holds K/V for (`cached`). Each
step it first catches up on the tokens it has not seen (the whole prompt the first time; later the
one or two tokens that verification added), which yields its first guess, then decodes k - 1
more. Guesses the target rejects leave K/V behind in slots past `cached`: the next step overwrites
them, as every position keeps its slot.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.core import Req
from minisgl.engine.engine import Engine

from .batches import last_indices, make_batch, view
from .verify_graph import VerifyGraphs

# Tokens a steady-state catch-up brings per request: the target's own token, and the last guess
# when every guess was kept (it was never fed back to the draft).
CATCH_UP_TOKENS = 2


@dataclass
class Pending:
    """What the draft computed in the step being verified, for `verified` to settle."""

    seen: int  # the request's length when the draft proposed (its K/V covered seen - 1 tokens
    # plus the k - 1 guesses it fed back)
    proposed: int


class DraftModel:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.catch_up = VerifyGraphs(engine, CATCH_UP_TOKENS)  # no graphs on a CPU
        self.catch_up.capture()
        self.cached: dict[int, int] = {}  # uid -> leading tokens whose draft K/V are valid
        self._pending: dict[int, Pending] = {}

    def propose(self, reqs: list[Req], limits: list[int]) -> list[list[int]]:
        """Up to limits[i] greedy guesses for reqs[i] (slots for them already allocated)."""
        out: list[list[int]] = [[] for _ in reqs]
        active = [i for i, k in enumerate(limits) if k > 0]
        if not active:
            return out
        # 1. catch up: every token the draft has not computed, up to the last one, in one extend
        views, new = [], []
        for i in active:
            req = reqs[i]
            seen = min(self.cached.get(req.uid, 0), len(req.input_ids) - 1)
            views.append(view(req, seen, len(req.input_ids) - seen))
            new.append(req.input_ids[seen:])
            self._pending[req.uid] = Pending(len(req.input_ids), limits[i])
        guesses = self._catch_up(views, new)
        for i, token in zip(active, guesses):
            out[i].append(token)
        # 2. decode: feed each guess back while a request wants more
        for step in range(1, max(limits)):
            active = [i for i in active if limits[i] > step]
            if not active:
                break
            views = [view(reqs[i], len(reqs[i].input_ids) - 1 + step, 1) for i in active]
            new = [[out[i][-1]] for i in active]
            guesses = self._greedy(make_batch(self.engine, views, new), None)
            for i, token in zip(active, guesses):
                out[i].append(token)
        return out

    def _catch_up(self, views: list[Req], new: list[list[int]]) -> list[int]:
        """The draft's greedy token after each request's new tokens (computing their K/V)."""
        graphs = self.catch_up
        if graphs.can_run(views, new):
            logits = graphs.run(views, new)
            last = [i * graphs.q + len(n) - 1 for i, n in enumerate(new)]
            return logits[torch.tensor(last, device=logits.device)].argmax(dim=-1).tolist()
        return self._greedy(make_batch(self.engine, views, new),
                            last_indices(new, self.engine.device))

    def _greedy(self, batch, indices: torch.Tensor | None) -> list[int]:
        if indices is None:  # a decode batch: one row per request
            indices = torch.arange(batch.size, device=self.engine.device)
        return self.engine.forward_logits(batch, indices).argmax(dim=-1).tolist()

    def verified(self, req: Req, accepted: int) -> None:
        """The target kept `accepted` of this request's guesses: the draft's K/V is valid for
        the tokens it computed that are still the request's (its guesses 1 .. proposed-1 were
        fed back; the last guess never was)."""
        pending = self._pending.pop(req.uid, None)
        if pending is not None:
            self.cached[req.uid] = pending.seen + min(accepted, pending.proposed - 1)

    def forget(self, req: Req) -> None:
        """The request gave its slots back (finished, aborted or retracted)."""
        self.cached.pop(req.uid, None)
        self._pending.pop(req.uid, None)
