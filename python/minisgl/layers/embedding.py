"""Token embedding and the LM head (which may share the embedding's weight), split over the
vocabulary for tensor parallelism (chapter 17).

With tp ranks each rank holds ceil(vocab / tp) consecutive rows of the table (the last rank's tail
past the vocabulary is zero padding). The embedding looks up only the ids that fall in its rows
and writes zeros for the others; an all-reduce of the [tokens, hidden] results gives every rank
the full embeddings. The LM head multiplies by its rows only, giving a slice of the logits; an
all-gather puts the slices side by side.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl import ops
from minisgl.distributed import all_gather_last_dim, all_reduce, get_tp_info
from minisgl.utils.misc import cdiv

from .base import BaseOP


class VocabParallelEmbedding(BaseOP):
    """ids -> rows of the embedding table; each rank holds rows [start, start + rows)."""

    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        tp = get_tp_info()
        self.vocab_size = vocab_size
        self._tp = tp.size
        per_rank = cdiv(vocab_size, tp.size)
        self.vocab_start = min(tp.rank * per_rank, vocab_size)
        self.vocab_rows = min(per_rank, vocab_size - self.vocab_start)  # real rows, no padding
        if self.vocab_rows < 1:
            raise ValueError(f"a vocabulary of {vocab_size} cannot be split over {tp.size} ranks")
        self.weight = torch.empty(per_rank, hidden_size)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self._tp == 1:
            return ops.embedding(self.weight, ids)  # a custom CUDA kernel on GPUs (chapter 19)
        # ids outside this rank's rows give zero rows; the sum over ranks fills every row once
        return all_reduce(ops.embedding(self.weight, ids, self.vocab_start, self.vocab_rows))


class ParallelLMHead(BaseOP):
    """hidden -> logits over the vocabulary. With tied embeddings (SmolLM2, Qwen3-0.6B) it reuses
    the embedding table, so the checkpoint has no lm_head.weight and none is loaded."""

    def __init__(self, vocab_size: int, hidden_size: int,
                 tied_to: VocabParallelEmbedding | None = None) -> None:
        self.vocab_size = vocab_size
        self._tp = get_tp_info().size
        if tied_to is None:
            self.weight = torch.empty(cdiv(vocab_size, self._tp), hidden_size)
        else:
            self._tied_to = tied_to  # underscore: not a weight of its own

    def logits_weight(self) -> torch.Tensor:
        return self._tied_to.weight if hasattr(self, "_tied_to") else self.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "_packed_weight"):  # packed for the CPU (chapter 20, layers/cpu_pack.py)
            logits = ops.linear(hidden, self._packed_weight)
        else:
            logits = F.linear(hidden, self.logits_weight())
        if self._tp == 1:
            return logits
        return all_gather_last_dim(logits)[..., : self.vocab_size]  # drop the padding rows
