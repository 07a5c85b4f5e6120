"""Reference solution of exercise 401 (vectorised over the batch)."""

import torch


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    batch, vocab = logits.shape
    ordered = logits.sort(dim=-1, descending=True).values
    k = top_k.long()
    k = torch.where((k <= 0) | (k >= vocab), torch.full_like(k, vocab), k)
    kth = ordered.gather(1, (k - 1).unsqueeze(1))
    keep = logits >= kth

    probs = logits.masked_fill(~keep, float("-inf")).float().softmax(dim=-1)
    sorted_probs = probs.sort(dim=-1, descending=True).values
    cumulative = sorted_probs.cumsum(dim=-1)
    p = top_p.float().unsqueeze(1)
    first = (cumulative < p).sum(dim=-1, keepdim=True).clamp(max=vocab - 1)
    threshold = sorted_probs.gather(1, first)
    keep &= (p >= 1) | (probs >= threshold)
    return logits.masked_fill(~keep, float("-inf"))
