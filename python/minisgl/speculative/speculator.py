"""One speculative decode step for every running request (chapter 24).

Plain decoding reads all the target's weights to produce one token per request. A speculative
step first guesses up to k next tokens per request (proposer: ngram.py or draft.py), then runs the
target once over the last token and the guesses, an extend of k + 1 tokens that reads the weights
once, and keeps the guesses its own distribution agrees with (accept.py) plus one token of its
own. A step thus yields between 1 and k + 1 tokens per request, and its output is exactly what
plain decoding would give (greedy) or has exactly its distribution (sampling).

Requests that ask for penalties or log-probabilities take no guesses (their next token depends on
counts that every accepted token would change, or they want a report per token that the
verification does not compute): they decode one token per step, in the same batch, through the
engine's sampler, exactly as without speculation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from minisgl.core import Req
from minisgl.engine.engine import Engine, ForwardOutput
from minisgl.ops.sampling import fold_seed, top_k_top_p_filter, uniform_from
from minisgl.utils.transfer import to_device

from .accept import accept_greedy, accepted_lengths, draw_last
from .batches import make_batch
from .draft import DraftModel
from .ngram import propose_ngram
from .verify_graph import VerifyGraphs

# The acceptance test of a guess draws its own uniform number, independent of the one that
# draws a token at the same position: the request's seed is mixed with this before hashing.
ACCEPT_SALT = fold_seed(0x5BD1E995)


@dataclass
class StepResult:
    """What one speculative step produced, per request of the batch (same order)."""

    tokens: list[list[int]]  # the new tokens: accepted guesses, then the target's own
    logprobs: list[tuple[float, list[int], list[float]] | None]  # plain rows that asked
    drafted: int = 0  # guesses verified in this step, all requests
    accepted: int = 0  # of those, kept
    per_request_accepted: list[int] = field(default_factory=list)


class SlotAllocator(Protocol):
    """What a step needs of the scheduler's CacheManager: KV slots for a request's guesses."""

    def allocate(self, req: Req, upto: int) -> bool: ...


class Speculator:
    def __init__(self, algorithm: str, num_draft_tokens: int, target: Engine,
                 cache: SlotAllocator, draft: DraftModel | None = None) -> None:
        self.algorithm = algorithm
        self.k = num_draft_tokens
        self.target = target
        self.cache = cache
        self.draft = draft
        self.graphs = VerifyGraphs(target, num_draft_tokens + 1)  # none on a CPU
        self.graphs.capture()

    def step(self, reqs: list[Req]) -> StepResult:
        """Guess, verify and accept for the running requests. Each request's last token has no
        K/V yet and its slot is allocated (the scheduler's decode preparation)."""
        limits = [self._limit(req) for req in reqs]
        if self.draft is not None:
            guesses = self.draft.propose(reqs, limits)
        else:
            guesses = [propose_ngram(req.input_ids, k) for req, k in zip(reqs, limits)]
        result = self._verify(reqs, guesses)
        if self.draft is not None:
            for req, kept in zip(reqs, result.per_request_accepted):
                self.draft.verified(req, kept)
        return result

    def _limit(self, req: Req) -> int:
        """How many guesses this request may take: k, less near max_tokens or the context end,
        and only as many as its slots allow (a guess's K/V needs one; no one is retracted for a
        guess), 0 for requests served by the plain sampler."""
        params = req.sampling_params
        if params.has_penalties or params.logprobs is not None:
            return 0
        n = len(req.input_ids)
        left = params.max_tokens - (n - req.prompt_len)  # tokens it may still emit, >= 1
        k = max(0, min(self.k, left - 1, self.target.max_seq_len - n))
        if k and not self.cache.allocate(req, n + k):
            k = max(0, req.alloc_len - n)
        return k

    def forget(self, req: Req) -> None:
        if self.draft is not None:
            self.draft.forget(req)

    @torch.inference_mode()
    def _verify(self, reqs: list[Req], guesses: list[list[int]]) -> StepResult:
        """The target over [last token, guesses...] of every request, and the tokens kept."""
        target = self.target
        tokens = [[req.input_ids[-1], *g] for req, g in zip(reqs, guesses)]
        for req, new in zip(reqs, tokens):
            req.cached_len, req.extend_len = len(req.input_ids) - 1, len(new)
        if self.graphs.can_run(reqs, tokens):  # a CUDA graph: request i's rows from i * q
            logits = self.graphs.run(reqs, tokens)
            starts = [i * self.graphs.q for i in range(len(reqs))]
        else:
            logits = target.forward_logits(make_batch(target, reqs, tokens), None)
            starts, at = [], 0  # [sum of (k_i + 1), V]: request i's rows from starts[i]
            for new in tokens:
                starts.append(at)
                at += len(new)
        result = StepResult([[] for _ in reqs], [None] * len(reqs),
                            per_request_accepted=[0] * len(reqs))
        greedy_host = target.sampler.greedy_host
        plain, greedy, sampled = [], [], []
        for i, (req, g) in enumerate(zip(reqs, guesses)):
            if not g:
                plain.append(i)
            elif bool(greedy_host[req.table_idx]):
                greedy.append(i)
            else:
                sampled.append(i)
        if greedy:
            argmax = logits.argmax(dim=-1).tolist()
            for i in greedy:
                new = accept_greedy(argmax[starts[i] : starts[i] + len(tokens[i])], guesses[i])
                result.tokens[i] = new
        if sampled:
            self._accept_sampled(reqs, guesses, logits, starts, sampled, result)
        if plain:
            self._sample_plain(reqs, logits, starts, plain, result)
        for i, g in enumerate(guesses):
            kept = len(result.tokens[i]) - 1
            result.per_request_accepted[i] = kept
            result.drafted += len(g)
            result.accepted += kept
        return result

    def _sample_plain(self, reqs: list[Req], logits: torch.Tensor, starts: list[int],
                      plain: list[int], result: StepResult) -> None:
        """Requests without guesses: one token each through the engine's sampler (penalties,
        seeds, log-probabilities exactly as in plain decoding)."""
        device = self.target.device
        rows_host = torch.tensor([reqs[i].table_idx for i in plain], dtype=torch.int64)
        rows = to_device(rows_host, torch.int64, device)
        positions = to_device([len(reqs[i].input_ids) for i in plain], torch.int64, device)
        picked = logits[to_device([starts[i] for i in plain], torch.int64, device)]
        sampler = self.target.sampler
        new = sampler.sample(picked, rows_host, rows, positions)
        # the engine's own record of a sampled step, read back as plain decoding reads it
        done = ForwardOutput(new, new, None, sampler.logprobs(picked, rows_host, new))
        for i, token, lp in zip(plain, done.tolist(), done.logprob_lists()):
            result.tokens[i], result.logprobs[i] = [token], lp

    def _accept_sampled(self, reqs: list[Req], guesses: list[list[int]], logits: torch.Tensor,
                        starts: list[int], sampled: list[int], result: StepResult) -> None:
        """Requests that sample and have guesses: the rejection rule of accept.py. Their
        verified positions are gathered into one block: request n owns rows bases[n] ..
        bases[n] + k_n, the distribution of the token after each verified token."""
        device = self.target.device
        index, rows, positions, bases = [], [], [], []
        guess_rows, guess_tokens = [], []
        for i in sampled:
            req, g = reqs[i], guesses[i]
            bases.append(len(index))
            guess_rows += range(len(index), len(index) + len(g))
            guess_tokens += g
            index += range(starts[i], starts[i] + len(g) + 1)
            rows += [req.table_idx] * (len(g) + 1)
            positions += range(len(req.input_ids), len(req.input_ids) + len(g) + 1)
        rows_d = to_device(rows, torch.int64, device)
        positions_d = to_device(positions, torch.int64, device)
        probs = self._target_probs(logits[to_device(index, torch.int64, device)], rows_d)
        seed32 = self.target.sampler.seed32[rows_d]
        u_accept = uniform_from(seed32 ^ ACCEPT_SALT, positions_d).tolist()
        p_guess = probs[to_device(guess_rows, torch.int64, device),
                        to_device(guess_tokens, torch.int64, device)].tolist()
        p_lists, u_lists, cursor = [], [], 0
        for base, i in zip(bases, sampled):
            k = len(guesses[i])
            p_lists.append(p_guess[cursor : cursor + k])
            u_lists.append(u_accept[base : base + k])
            cursor += k
        kept = accepted_lengths(p_lists, u_lists)
        last = to_device([b + j for b, j in zip(bases, kept)], torch.int64, device)
        rejected = [guesses[i][j] if j < len(guesses[i]) else -1 for i, j in zip(sampled, kept)]
        # the last token is drawn with the sampler's own number for its position
        drawn = draw_last(probs[last], to_device(rejected, torch.int64, device),
                          uniform_from(seed32[last], positions_d[last])).tolist()
        for i, j, token in zip(sampled, kept, drawn):
            result.tokens[i] = [*guesses[i][:j], token]

    def _target_probs(self, logits: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """softmax(logits / temperature) cut to each row's top-k / top-p set, as the sampler
        draws from (rows: page-table rows of the requests)."""
        sampler = self.target.sampler
        scaled = logits.float() / sampler.temperature[rows].unsqueeze(1)
        if bool(sampler.filtered_host[rows.cpu()].any()):
            scaled = top_k_top_p_filter(scaled, sampler.top_k[rows], sampler.top_p[rows])
        return scaled.softmax(dim=-1)
