"""Drawing tokens from a batch of logits cut to each row's top-k / top-p set (chapter 16).

The sampler of engine/device_sample.py draws one uniform number per row from a counter-based hash
and picks the token by inverse CDF; rows with a top-k or top-p cut go through the op here.
"""

from __future__ import annotations

import torch

from minisgl.engine.sample import top_k_top_p_filter

from .registry import Op


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
