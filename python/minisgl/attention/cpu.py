"""The CPU backend (chapter 20): torch's prefill, and decode in C++ straight over the paged pool.

Prefill on a CPU is a few long matrix multiplies that SDPA's flash kernel already does well, so
it stays the torch backend's. Decode is one query token per request: the torch backend gathers
every request's K/V into a new tensor first, which on a CPU costs as much as the attention; the
kernel of kernel/cpu_attention.py reads each K/V row where it lies instead. It covers fp32 and
bf16 pools; any other dtype decodes through the torch backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.core import Batch
from minisgl.kernel import cpu_attention
from minisgl.kvcache.mha_pool import MHAKVCache

from .torch_native import TorchNativeBackend


@dataclass
class CpuDecodeMetadata:
    table_rows: torch.Tensor  # [B] int64: each request's row of the page table
    kv_lens: torch.Tensor  # [B] int64: cached + new tokens of each request


class CpuBackend(TorchNativeBackend):
    def __init__(self, kv_cache: MHAKVCache, page_table: torch.Tensor, num_qo_heads: int,
                 num_kv_heads: int) -> None:
        super().__init__(kv_cache, page_table, num_qo_heads, num_kv_heads)
        if page_table.device.type != "cpu":
            raise ValueError("the cpu attention backend runs on a CPU only")
        self.kernel_decodes = kv_cache.config.dtype in cpu_attention.DTYPES and self.available()

    @staticmethod
    def available() -> bool:
        """The C++ kernel built here (a compiler was found) and is not switched off."""
        return cpu_attention.available()

    def prepare_metadata(self, batch: Batch) -> None:
        if batch.is_prefill or not self.kernel_decodes:
            return super().prepare_metadata(batch)
        batch.attn_metadata = CpuDecodeMetadata(
            torch.tensor([r.table_idx for r in batch.reqs], dtype=torch.int64),
            torch.tensor([r.seq_len for r in batch.reqs], dtype=torch.int64))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        meta = batch.attn_metadata
        if not isinstance(meta, CpuDecodeMetadata):
            return super().forward(q, k, v, layer_id, batch)
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        # every layer of a step shares the tables and the pool's layout: check them once
        return cpu_attention.decode_attention(
            q, self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id), self.page_table,
            meta.table_rows, meta.kv_lens, q.shape[-1] ** -0.5, check=layer_id == 0)
