"""The simplest possible generation loop: no KV cache, the whole sequence recomputed each step.

Step t costs a forward pass over all t tokens, so generating n tokens costs O(n^2) token-passes.
It is slow, but obviously correct, and chapter 7's engine must produce exactly the same greedy
tokens while doing O(n) work.
"""

from __future__ import annotations

import torch

from minisgl.core import SamplingParams
from minisgl.models.base import CausalLM

from .sample import Sampler


def naive_generate(model: CausalLM, prompt_ids: list[int], params: SamplingParams,
                   sampler: Sampler | None = None, eos_token_ids: tuple[int, ...] = ()
                   ) -> list[int]:
    """Generate up to params.max_tokens tokens after prompt_ids (None: up to the end of the
    model's context); returns only the new tokens."""
    if not prompt_ids:
        raise ValueError("the prompt is empty")
    limit = model.config.max_position_embeddings
    max_tokens = params.max_tokens or limit - len(prompt_ids)
    if len(prompt_ids) + max_tokens > limit or max_tokens <= 0:
        raise ValueError(f"prompt ({len(prompt_ids)} tokens) + max_tokens ({max_tokens}) "
                         f"exceeds the model's context of {limit} tokens")
    sampler = sampler or Sampler(seed=0)
    device = model.model.embed_tokens.weight.device
    ids = torch.tensor(prompt_ids, dtype=torch.int64, device=device)
    new_tokens: list[int] = []
    for _ in range(max_tokens):
        positions = torch.arange(len(ids), device=device)
        last = torch.tensor([len(ids) - 1], device=device)
        logits = model.forward(ids, positions, output_indices=last)
        token = int(sampler.sample(logits, [params])[0])
        new_tokens.append(token)
        if token in eos_token_ids and not params.ignore_eos:
            break
        ids = torch.cat([ids, torch.tensor([token], device=device)])
    return new_tokens
