"""Sampling a whole batch on the device, each request's parameters kept in device rows (chapter 16).

The sampler of chapter 4 builds temperature, top-k and top-p tensors from Python lists at every
step and draws with torch.multinomial. Here they are written once, when a request is prefilled,
into device tensors indexed by the request's page-table row, and each step gathers the rows of its
batch: no per-request Python and no host round trip, so the step can be queued while the previous
one still runs (overlap scheduling).

Random numbers are counter-based: the uniform number that picks a request's token at sequence
position p is a hash of (the request's seed, p), computed with integer tensor ops. The same seed
therefore gives the same tokens whichever batch, row or step the request lands in. The token is
drawn by inverse CDF: the first token whose cumulative probability exceeds that number. One number
per row is enough, where Gumbel-max would need one per vocabulary entry.

"The same tokens" holds for the same logits, bit for bit. A prompt found in the prefix cache and
the same prompt computed whole give logits that differ in the last bits (other matrix shapes, other
summation orders), and the cumulative sum over ~50k tokens of a flat distribution has a boundary
every few 1e-5, so a shift of 1e-6 moves the draw to a neighbouring token now and then: on
SmolLM2 with random 12-token prompts, 5 of 300 four-token samples differed between the two paths
(seeded runs of vLLM and SGLang carry the same caveat). Gumbel-max would be far less sensitive,
at the price of a random number per vocabulary entry.

Penalties on tokens already seen need each row's token counts: a [rows, vocab] tensor on the
device, made when the first request with a penalty arrives, reset from the request's tokens when
it is prefilled and bumped by one scatter per step from the sampled tokens themselves, so it is
right without the host ever reading a token (overlap scheduling) and costs nothing otherwise.
Log-probabilities are computed for the rows that asked only, from the raw logits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from minisgl import ops
from minisgl.core import SamplingParams
from minisgl.ops.sampling import fold_seed, uniform_from
from minisgl.utils.transfer import to_device


def apply_penalties(logits: torch.Tensor, counts: torch.Tensor, in_prompt: torch.Tensor,
                    presence: torch.Tensor, frequency: torch.Tensor, repetition: torch.Tensor
                    ) -> torch.Tensor:
    """Logits [B, V] fp32 after the penalties on tokens already seen, in vLLM's order.

    counts [B, V]: how often each token was generated so far; in_prompt [B, V] bool; presence,
    frequency, repetition [B]. Repetition (prompt and generated tokens) scales the logit away from
    zero's side it is on: divided when positive, multiplied when negative. Then presence and
    frequency (generated tokens only) subtract presence * [count > 0] + frequency * count."""
    generated = counts > 0
    factor = torch.where(in_prompt | generated, repetition.unsqueeze(1), 1.0)
    logits = torch.where(logits > 0, logits / factor, logits * factor)
    return logits - presence.unsqueeze(1) * generated - frequency.unsqueeze(1) * counts


@dataclass
class TokenLogprobs:
    """Log-probabilities of one step, for the batch entries in `index` (those that asked)."""

    index: list[int]  # batch positions, on the host
    top_k: list[int]  # how many top tokens each of them asked for
    chosen: torch.Tensor  # [N] fp32: the log-probability of the sampled token
    top_ids: torch.Tensor  # [N, K] int64, K = max(top_k), most likely first
    top_logprobs: torch.Tensor  # [N, K] fp32


class DeviceSampler:
    """Per-row sampling parameters on the device, and the batched draw over them."""

    def __init__(self, num_rows: int, device: torch.device, seed: int | None = None,
                 vocab_size: int | None = None) -> None:
        self.device = device
        self.vocab_size = vocab_size  # needed only once a request has a penalty
        # A request without a seed gets one from (engine seed, uid): runs with the same engine
        # seed repeat, and a retracted request keeps its random stream when it comes back.
        self.engine_seed = seed if seed is not None else random.SystemRandom().getrandbits(63)
        # 0 for a greedy row (ops.sample takes the argmax there)
        self.temperature = torch.zeros(num_rows, dtype=torch.float32, device=device)
        self.top_k = torch.full((num_rows,), -1, dtype=torch.int64, device=device)
        self.top_p = torch.ones(num_rows, dtype=torch.float32, device=device)
        self.seed32 = torch.zeros(num_rows, dtype=torch.int64, device=device)
        self.greedy = torch.ones(num_rows, dtype=torch.bool, device=device)
        # Host copies of two flags per row: a step decides which ops to queue from them, without
        # reading anything back from the GPU.
        self.greedy_host = torch.ones(num_rows, dtype=torch.bool)
        self.filtered_host = torch.zeros(num_rows, dtype=torch.bool)
        self.penalized_host = torch.zeros(num_rows, dtype=torch.bool)
        self.logprobs_host = torch.full((num_rows,), -1, dtype=torch.int64)  # -1: not asked
        self.presence = torch.zeros(num_rows, dtype=torch.float32, device=device)
        self.frequency = torch.zeros(num_rows, dtype=torch.float32, device=device)
        self.repetition = torch.ones(num_rows, dtype=torch.float32, device=device)
        # [rows, vocab], made by the first reset_counts: generated-token counts (fp32, exact up
        # to 2**24) and which tokens the prompt holds
        self.counts: torch.Tensor | None = None
        self.in_prompt: torch.Tensor | None = None

    def set_rows(self, rows: list[int], params: list[SamplingParams], uids: list[int]) -> None:
        """Write the parameters of the requests that own `rows` (called when they are prefilled,
        so a row handed to a new request, or a retracted request's new row, is rewritten)."""
        seeds = [p.seed if p.seed is not None else self._default_seed(uid)
                 for p, uid in zip(params, uids)]
        greedy = [p.is_greedy for p in params]
        index = to_device(rows, torch.int64, self.device)
        self.temperature[index] = to_device([0.0 if g else p.temperature
                                             for p, g in zip(params, greedy)],
                                            torch.float32, self.device)
        self.top_k[index] = to_device([p.top_k for p in params], torch.int64, self.device)
        self.top_p[index] = to_device([p.top_p for p in params], torch.float32, self.device)
        self.seed32[index] = to_device([fold_seed(s) for s in seeds], torch.int64, self.device)
        self.greedy[index] = to_device(greedy, torch.bool, self.device)
        host_rows = torch.tensor(rows, dtype=torch.int64)
        self.greedy_host[host_rows] = torch.tensor(greedy)
        self.filtered_host[host_rows] = torch.tensor([p.top_k > 0 or p.top_p < 1
                                                      for p in params])
        self.penalized_host[host_rows] = torch.tensor([p.has_penalties for p in params])
        self.logprobs_host[host_rows] = torch.tensor(
            [-1 if p.logprobs is None else p.logprobs for p in params], dtype=torch.int64)
        self.presence[index] = to_device([p.presence_penalty for p in params], torch.float32,
                                         self.device)
        self.frequency[index] = to_device([p.frequency_penalty for p in params], torch.float32,
                                          self.device)
        self.repetition[index] = to_device([p.repetition_penalty for p in params],
                                           torch.float32, self.device)

    def reset_counts(self, rows: list[int], prompts: list[list[int]],
                     outputs: list[list[int]]) -> None:
        """Start the token counts of penalized requests: what their prompts hold and what they
        generated so far (a retracted request comes back with its output)."""
        if self.counts is None:
            if self.vocab_size is None:
                raise RuntimeError("penalties need the sampler's vocab_size")
            shape = (len(self.greedy_host), self.vocab_size)
            self.counts = torch.zeros(shape, dtype=torch.float32, device=self.device)
            self.in_prompt = torch.zeros(shape, dtype=torch.bool, device=self.device)
        assert self.in_prompt is not None
        index = to_device(rows, torch.int64, self.device)
        self.counts[index] = 0
        self.in_prompt[index] = False
        self.in_prompt[self._pairs(rows, prompts)] = True
        where = self._pairs(rows, outputs)
        self.counts.index_put_(where, torch.ones_like(where[1], dtype=torch.float32),
                               accumulate=True)  # a token generated twice counts twice

    def _pairs(self, rows: list[int], tokens: list[list[int]]
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """(row, token) index tensors of every token of every row's list."""
        row_of = [r for r, ids in zip(rows, tokens) for _ in ids]
        flat = [t for ids in tokens for t in ids]
        return (to_device(row_of, torch.int64, self.device),
                to_device(flat, torch.int64, self.device))

    def _default_seed(self, uid: int) -> int:
        return (self.engine_seed * 0x9E3779B97F4A7C15 + uid) & ((1 << 64) - 1)

    def sample(self, logits: torch.Tensor, rows_host: torch.Tensor, rows: torch.Tensor,
               positions: torch.Tensor) -> torch.Tensor:
        """Next tokens [B] (int64) for logits [B, V] of the requests in page-table rows `rows`
        (rows_host: the same rows on the CPU); positions [B]: where each new token will sit in
        its sequence, the counter of its random number."""
        penalized = bool(self.penalized_host[rows_host].any())
        if penalized:
            assert self.counts is not None and self.in_prompt is not None
            logits = apply_penalties(logits.float(), self.counts[rows], self.in_prompt[rows],
                                     self.presence[rows], self.frequency[rows],
                                     self.repetition[rows])
        if bool(self.greedy_host[rows_host].all()):
            tokens = logits.argmax(dim=-1)
        elif bool(self.filtered_host[rows_host].any()):
            tokens = self._draw_filtered(logits.float(), rows, positions)
        else:  # temperature only: one op (one kernel on a GPU) from the raw logits
            tokens = ops.sample(logits, self.temperature[rows], self.seed32[rows], positions)
        if penalized:  # count the new tokens, on the device (rows of a batch are distinct)
            self.counts[rows, tokens] += 1
        return tokens

    def _draw_filtered(self, logits: torch.Tensor, rows: torch.Tensor, positions: torch.Tensor
                       ) -> torch.Tensor:
        """A batch where some rows cut their distribution to a top-k / top-p set."""
        greedy = logits.argmax(dim=-1)
        temperature = self.temperature[rows]
        scaled = logits / torch.where(temperature > 0, temperature, 1.0).unsqueeze(1)
        u = uniform_from(self.seed32[rows], positions)
        sampled = ops.top_k_top_p_sampling(scaled, self.top_k[rows], self.top_p[rows], u)
        return torch.where(self.greedy[rows], greedy, sampled)

    def logprobs(self, logits: torch.Tensor, rows_host: torch.Tensor, tokens: torch.Tensor
                 ) -> TokenLogprobs | None:
        """Log-softmax of the raw logits [B, V] (before penalties and temperature, what vLLM
        reports by default) for the batch entries whose requests asked; None if none did."""
        asked = self.logprobs_host[rows_host]
        index = (asked >= 0).nonzero().squeeze(1).tolist()
        if not index:
            return None
        top_k = asked[index].tolist()
        where = to_device(index, torch.int64, self.device)
        logp = logits[where].float().log_softmax(dim=-1)
        chosen = logp.gather(1, tokens[where].unsqueeze(1)).squeeze(1)
        top_logprobs, top_ids = logp.topk(max(top_k), dim=-1)
        return TokenLogprobs(index, top_k, chosen, top_ids, top_logprobs)
