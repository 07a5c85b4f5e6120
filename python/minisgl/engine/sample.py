"""Turning a batch of logits into next tokens, each row with its own sampling parameters.

Greedy rows take the argmax. The others are divided by their temperature, cut to their top-k and
top-p sets, and sampled from the softmax. Everything is done with batched tensor operations, so a
batch with mixed parameters costs one pass, not one per request.
"""

from __future__ import annotations

import torch

from minisgl.core import SamplingParams
from minisgl.ops.sampling import top_k_top_p_filter


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
