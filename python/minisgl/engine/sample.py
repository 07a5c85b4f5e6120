"""Turning a batch of logits into next tokens, each row with its own sampling parameters.

Greedy rows take the argmax. The others are divided by their temperature, cut to their top-k and
top-p sets, and sampled from the softmax. Everything is done with batched tensor operations, so a
batch with mixed parameters costs one pass, not one per request.
"""

from __future__ import annotations

import torch

from minisgl.core import SamplingParams


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


class Sampler:
    def __init__(self, device: torch.device | str = "cpu", seed: int | None = None) -> None:
        self.generator = torch.Generator(device=device)
        if seed is not None:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()

    def sample(self, logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
        """logits: [B, V] -> next token ids [B] (int64)."""
        if len(params) != logits.shape[0]:
            raise ValueError(f"{logits.shape[0]} rows of logits but {len(params)} sampling params")
        logits = logits.float()
        greedy = logits.argmax(dim=-1)
        if all(p.is_greedy for p in params):
            return greedy
        device = logits.device
        temperature = torch.tensor([p.temperature or 1.0 for p in params], device=device)
        top_k = torch.tensor([p.top_k for p in params], device=device)
        top_p = torch.tensor([p.top_p for p in params], device=device)
        filtered = top_k_top_p_filter(logits / temperature.unsqueeze(1), top_k, top_p)
        sampled = torch.multinomial(filtered.softmax(dim=-1), 1, generator=self.generator)
        is_greedy = torch.tensor([p.is_greedy for p in params], device=device)
        return torch.where(is_greedy, greedy, sampled.squeeze(1))
