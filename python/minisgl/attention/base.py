"""The interface every attention backend implements.

A backend owns two steps: `prepare_metadata` turns the scheduler's view of a batch (requests,
cached lengths, page table rows) into whatever index tensors its kernels want, once per batch;
`forward` is called by every layer with that layer's q, k, v and must store the new k, v into the
KV pool before attending over each request's whole sequence.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from minisgl.core import Batch


class BaseAttnBackend(ABC):
    @abstractmethod
    def prepare_metadata(self, batch: Batch) -> None:
        """Attach backend-specific metadata to batch.attn_metadata."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        """q: [tokens, qo_heads, head_dim], k/v: [tokens, kv_heads, head_dim] (new tokens only).

        Returns [tokens, qo_heads, head_dim].
        """
