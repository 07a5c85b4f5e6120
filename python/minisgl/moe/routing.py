"""Routing: which k experts each token goes to, and with what weight (the torch version).

The router is one linear layer that scores every expert for every token. Qwen3-MoE turns the scores
into probabilities with a softmax over all experts, keeps the k largest, and (norm_topk_prob) divides
them by their sum so that the k weights of a token add up to 1. The softmax runs in fp32 whatever
the model's dtype, as Hugging Face does: in bf16, probabilities of 128 experts lose most digits.
"""

from __future__ import annotations

import torch


def route(router_logits: torch.Tensor, top_k: int, normalize: bool
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """topk_weights [T, k] fp32 and topk_ids [T, k] int32 from router_logits [T, E]."""
    probs = torch.softmax(router_logits.float(), dim=-1)
    weights, ids = torch.topk(probs, top_k, dim=-1)
    if normalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)
