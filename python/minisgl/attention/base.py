"""The interface every attention backend implements.

A backend is built once per engine and handed what it reads and writes: the KV pool and the page
table (`page_table[row, position]` = the pool slot of that token), plus the head counts. It owns
two steps: `prepare_metadata` turns the scheduler's view of a batch (requests, cached lengths,
page table rows) into whatever index tensors its kernels want, once per batch; `forward` is called
by every layer with that layer's q, k, v and must store the new k, v into the KV pool before
attending over each request's whole sequence.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from minisgl.core import Batch
from minisgl.kvcache.mha_pool import MHAKVCache


class BaseAttnBackend(ABC):
    def __init__(self, kv_cache: MHAKVCache, page_table: torch.Tensor, num_qo_heads: int,
                 num_kv_heads: int) -> None:
        if num_qo_heads % num_kv_heads != 0:
            raise ValueError(f"{num_qo_heads} query heads cannot share {num_kv_heads} KV heads "
                             "evenly")
        self.kv_cache = kv_cache
        self.page_table = page_table  # [max_running_reqs, max_seq_len] int32
        self.num_qo_heads = num_qo_heads
        self.num_kv_heads = num_kv_heads

    @abstractmethod
    def prepare_metadata(self, batch: Batch) -> None:
        """Attach backend-specific metadata to batch.attn_metadata."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        """q: [tokens, qo_heads, head_dim], k/v: [tokens, kv_heads, head_dim] (new tokens only).

        Returns [tokens, qo_heads, head_dim].
        """
    # >>> ch15

    # A backend whose decode can be recorded in a CUDA graph (chapter 15) sets this and implements
    # the three hooks below: static metadata buffers, the metadata a graph is recorded with, and
    # copying a real batch into those buffers before each replay.
    supports_cuda_graph = False

    def init_graph_buffers(self, max_bs: int) -> None:
        """Allocate static metadata buffers for decode batches of up to max_bs requests."""
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")

    def prepare_for_capture(self, batch: Batch) -> None:
        """Attach metadata that reads the static buffers (rows [0, batch.size)) to a batch of
        padding rows, the batch a graph is recorded with."""
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")

    def prepare_for_replay(self, batch: Batch, padded_size: int) -> None:
        """Write a real decode batch's metadata into the static buffers: its rows first, then
        padding rows up to padded_size that attend over nothing."""
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")
    # <<< ch15
    # >>> ch24

    # Speculative decoding (chapter 24) records its verification too: q new tokens per row.
    supports_verify_graph = False
    # <<< ch24
