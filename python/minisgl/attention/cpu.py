"""The CPU backend (chapter 20): attention in C++ straight over the paged pool.

Decode is one query token per request: the torch backend gathers every request's K/V into a new
tensor first, which on a CPU costs as much as the attention; the kernel of
kernel/cpu_attention.py reads each K/V row where it lies instead. A prefill goes through the same
kernel: its new K/V are stored first, and then each new token is a row of its own, whose sequence
ends at its position: token i of a request with c cached tokens attends to the c + i + 1 keys up
to itself, which is causal attention with the cached prefix included. Each query reads its whole
prefix again, where SDPA reads a block of keys once for a block of queries, so this pays only
for short sequences and with vdpbf16ps: one layer of SmolLM2's heads in bf16 on the 2-core
AVX-512 VM took about half SDPA's time for three prompts of 130 tokens and two thirds of it for
one of 512, but more than SDPA from 2048 tokens on, and in fp32 from 512
(benchmarks/results/cpu_prefill_attention.txt). So a prefill goes to the kernel when the pool is
bf16, the kernel has vdpbf16ps and no sequence is longer than PREFILL_MAX_KEYS; otherwise to
SDPA. The kernel covers fp32 and bf16 pools; any other dtype runs the torch backend.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.core import Batch
from minisgl.kernel import cpu_attention
from minisgl.kvcache.mha_pool import MHAKVCache

from .torch_native import TorchNativeBackend

PREFILL_MAX_KEYS = 1024  # longer sequences prefill through SDPA (measured: module docstring)


@dataclass
class CpuKernelMetadata:
    """One row per new token (per request in a decode batch): where its sequence is."""

    table_rows: torch.Tensor  # [tokens] int64: the token's request's row of the page table
    kv_lens: torch.Tensor  # [tokens] int64: the keys it sees: its position + 1


class CpuBackend(TorchNativeBackend):
    def __init__(self, kv_cache: MHAKVCache, page_table: torch.Tensor, num_qo_heads: int,
                 num_kv_heads: int) -> None:
        super().__init__(kv_cache, page_table, num_qo_heads, num_kv_heads)
        if page_table.device.type != "cpu":
            raise ValueError("the cpu attention backend runs on a CPU only")
        self.kernel_runs = kv_cache.config.dtype in cpu_attention.DTYPES and self.available()

    @staticmethod
    def available() -> bool:
        """The C++ kernel built here (a compiler was found) and is not switched off."""
        return cpu_attention.available()

    def prepare_metadata(self, batch: Batch) -> None:
        if not self.kernel_runs:
            return super().prepare_metadata(batch)
        if not batch.is_prefill:
            batch.attn_metadata = CpuKernelMetadata(
                torch.tensor([r.table_idx for r in batch.reqs], dtype=torch.int64),
                torch.tensor([r.seq_len for r in batch.reqs], dtype=torch.int64))
            return
        if not self.kernel_prefills(batch):
            return super().prepare_metadata(batch)
        # the i-th new token (from 0) of a request sees its cached_len + i + 1 keys
        batch.attn_metadata = CpuKernelMetadata(
            torch.cat([torch.full((r.extend_len,), r.table_idx, dtype=torch.int64)
                       for r in batch.reqs]),
            torch.cat([torch.arange(r.cached_len + 1, r.seq_len + 1) for r in batch.reqs]))

    def kernel_prefills(self, batch: Batch) -> bool:
        return (self.kv_cache.config.dtype == torch.bfloat16 and cpu_attention.has_dpbf16()
                and max(r.seq_len for r in batch.reqs) <= PREFILL_MAX_KEYS)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        meta = batch.attn_metadata
        if not isinstance(meta, CpuKernelMetadata):
            return super().forward(q, k, v, layer_id, batch)
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        # every layer of a step shares the tables and the pool's layout: check them once
        return cpu_attention.decode_attention(
            q, self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id), self.page_table,
            meta.table_rows, meta.kv_lens, q.shape[-1] ** -0.5, check=layer_id == 0)
