"""Sampling from a batch of logits: each row cut to its top-k / top-p set (chapter 4), and the op
that draws one token per row from what is left (chapter 16).

Chapter 4's Sampler (engine/sample.py) filters and then draws with torch.multinomial. The sampler
of engine/device_sample.py draws one uniform number per row from a counter-based hash and picks
the token by inverse CDF; rows with a top-k or top-p cut go through the op here.
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


top_k_top_p_sampling = Op("sampling", top_k_top_p_sampling_torch)
# <<< ch16
