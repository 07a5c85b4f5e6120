"""Sampling from a batch of logits: each row cut to its top-k / top-p set (chapter 4), and the op
that draws one token per row from what is left (chapter 16).

Chapter 4's Sampler (engine/sample.py) filters and then draws with torch.multinomial. The sampler
of engine/device_sample.py draws one uniform number per row from a counter-based hash and picks
the token by inverse CDF; rows with a top-k or top-p cut go through `top_k_top_p_sampling`, the
others through `sample`, which takes the raw logits, each row's temperature and the counters of
its random number, so that a GPU can do all of it in one kernel (chapter 20).
"""

from __future__ import annotations

import torch

from .registry import Op


def top_k_top_p_filter(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor
                       ) -> torch.Tensor:
    """Set logits outside each row's top-k / top-p set to -inf. logits: [B, V] fp32.

    top_k[b] <= 0 disables top-k for row b; top_p[b] == 1 disables top-p. The most likely token
    always survives, so no row is left empty.
    """
    sorted_logits, order = logits.sort(dim=-1, descending=True)
    rank = torch.arange(logits.shape[-1], device=logits.device).expand_as(sorted_logits)
    k = torch.where(top_k > 0, top_k, logits.shape[-1]).unsqueeze(1)
    drop = rank >= k
    probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(dim=-1)
    # Keep a token while the mass of the tokens *before* it is below top_p. Rows with top_p == 1
    # skip this: rounding can make the running sum reach 1.0 before the last token.
    mass_before = probs.cumsum(dim=-1) - probs
    top_p = top_p.unsqueeze(1)
    drop |= (mass_before >= top_p) & (top_p < 1)
    drop[:, 0] = False
    sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.empty_like(logits).scatter_(-1, order, sorted_logits)


# >>> ch16
MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xorshift-multiply rounds) of int64 values in [0, 2**32).

    Both multipliers are below 2**31, so no product leaves the int64 range."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & MASK32
    return x ^ (x >> 16)


def fold_seed(seed: int) -> int:
    """Any Python int -> the 32-bit key the hash takes (all 64 low bits count)."""
    seed &= (1 << 64) - 1
    return (seed ^ (seed >> 32)) & MASK32


def uniform_from(seed32: torch.Tensor, position: torch.Tensor) -> torch.Tensor:
    """One fp32 number in [0, 1) per row from (seed, position); int64 tensors of the same shape."""
    x = _mix32(_mix32(seed32) ^ (position & MASK32))
    x = _mix32(x ^ 0x9E3779B9)
    return (x >> 8).float() * (1.0 / (1 << 24))  # 24 bits: exactly representable, below 1


def inverse_cdf_sample(probs: torch.Tensor, u: torch.Tensor, fallback: torch.Tensor
                       ) -> torch.Tensor:
    """The first token whose cumulative probability exceeds u * total, per row.

    probs: [B, V] fp32 (rows need not sum to exactly 1), u: [B] in [0, 1), fallback: [B] a token
    of non-zero probability. Rounding in a parallel cumsum can, very rarely, put the draw on a
    token of probability zero (one that top-k/top-p removed); the fallback replaces it.
    """
    cdf = probs.cumsum(dim=-1)
    x = u.unsqueeze(1) * cdf[:, -1:]
    token = torch.searchsorted(cdf, x, right=True).squeeze(1).clamp_(max=probs.shape[1] - 1)
    ok = probs.gather(1, token.unsqueeze(1)).squeeze(1) > 0
    return torch.where(ok, token, fallback)


def top_k_top_p_sampling_torch(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor,
                               u: torch.Tensor) -> torch.Tensor:
    """Tokens [B] from temperature-scaled logits [B, V] cut to each row's top-k / top-p set,
    drawn with the row's uniform number u."""
    filtered = top_k_top_p_filter(logits, top_k, top_p)
    return inverse_cdf_sample(filtered.softmax(dim=-1), u, fallback=logits.argmax(dim=-1))


def sample_torch(logits: torch.Tensor, temperature: torch.Tensor, seed32: torch.Tensor,
                 positions: torch.Tensor) -> torch.Tensor:
    """Tokens [B] int64 from raw logits [B, V] (any float dtype): row b is greedy (the argmax)
    where temperature[b] == 0, else drawn by inverse CDF from softmax(logits / temperature) with
    the uniform number of (seed32[b], positions[b]). temperature [B] fp32, seed32 and positions
    [B] int64."""
    logits = logits.float()
    greedy = logits.argmax(dim=-1)
    hot = temperature > 0
    scaled = logits / torch.where(hot, temperature, 1.0).unsqueeze(1)
    drawn = inverse_cdf_sample(scaled.softmax(dim=-1), uniform_from(seed32, positions),
                               fallback=greedy)
    return torch.where(hot, drawn, greedy)


top_k_top_p_sampling = Op("sampling", top_k_top_p_sampling_torch)
sample = Op("sample", sample_torch)
# <<< ch16
