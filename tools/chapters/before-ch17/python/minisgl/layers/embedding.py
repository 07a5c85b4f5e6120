"""Token embedding and the LM head (which may share the embedding's weight)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl import ops

from .base import BaseOP


class VocabParallelEmbedding(BaseOP):
    """ids -> rows of the embedding table. "Vocab parallel": with tensor parallelism each rank
    holds a slice of the vocabulary (chapter 17); on one GPU it is a plain lookup."""

    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        self.weight = torch.empty(vocab_size, hidden_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return ops.embedding(self.weight, ids)  # a custom CUDA kernel on GPUs (chapter 19)


class ParallelLMHead(BaseOP):
    """hidden -> logits over the vocabulary. With tied embeddings (SmolLM2, Qwen3-0.6B) it reuses
    the embedding table, so the checkpoint has no lm_head.weight and none is loaded."""

    def __init__(self, vocab_size: int, hidden_size: int,
                 tied_to: VocabParallelEmbedding | None = None) -> None:
        if tied_to is None:
            self.weight = torch.empty(vocab_size, hidden_size)
        else:
            self._tied_to = tied_to  # underscore: not a weight of its own

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        weight = self._tied_to.weight if hasattr(self, "_tied_to") else self.weight
        return F.linear(hidden, weight)
