"""Paged attention with the Triton kernels of chapter 20: the whole batch in one launch per layer.

`prepare_metadata` turns the batch into a few small int32 device tensors (each request's
page-table row, its total length, and for prefill the offsets of its new tokens); every layer's
`forward` stores its new K/V into the pool and launches the extend kernel over them, or launches
the decode kernel, which stores them itself.
The kernels read K/V through the page table themselves, so nothing is gathered or padded here.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch

from minisgl.core import Batch
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.utils.transfer import copy_to_device, to_device

from .base import BaseAttnBackend


@dataclass
class TritonAttnMetadata:
    table_idx: torch.Tensor  # [B] int32: each request's page-table row
    kv_lens: torch.Tensor  # [B] int32: cached + new tokens
    cu_q_lens: torch.Tensor | None  # prefill: [B + 1] int32 offsets of each request's new tokens
    max_q_len: int  # prefill: the most new tokens of any request (sizes the grid)
    num_splits: int  # decode: pieces each sequence is cut into


class TritonBackend(BaseAttnBackend):
    def __init__(self, kv_cache: MHAKVCache, page_table: torch.Tensor, num_qo_heads: int,
                 num_kv_heads: int) -> None:
        super().__init__(kv_cache, page_table, num_qo_heads, num_kv_heads)
        # Imported here rather than at the top: Triton takes about half a second to import and,
        # without a GPU, switches to its interpreter; only an engine that picks this backend
        # should pay for that.
        from minisgl.kernel import triton as kernels

        self.kernels = kernels
        device, max_seq_len = page_table.device, page_table.shape[1]
        # Sized for the batch size that splits the most, so it fits every batch; allocated once
        # so that a captured CUDA graph (chapter 15) can keep pointing at it.
        max_splits = kernels.max_num_splits(num_kv_heads, max_seq_len, device)
        self.workspace = kernels.DecodeWorkspace.allocate(
            page_table.shape[0], num_qo_heads, kv_cache.config.head_dim, device, max_splits)

    def prepare_metadata(self, batch: Batch) -> None:
        device = self.page_table.device

        def int32(values: list[int]) -> torch.Tensor:
            return to_device(values, torch.int32, device)  # queued, never waited for

        table_idx = int32([r.table_idx for r in batch.reqs])
        kv_lens = int32([r.seq_len for r in batch.reqs])
        if batch.is_prefill:
            q_lens = [r.extend_len for r in batch.reqs]
            meta = TritonAttnMetadata(table_idx, kv_lens, int32([0, *accumulate(q_lens)]),
                                      max(q_lens), num_splits=1)
        else:
            splits = self.kernels.choose_num_splits(batch.size, self.num_kv_heads,
                                                    self.page_table.shape[1], device)
            meta = TritonAttnMetadata(table_idx, kv_lens, None, 1, splits)
        batch.attn_metadata = meta

    # CUDA graphs (chapter 15): the decode kernel's grid depends only on the batch size and the
    # split count, and it reads lengths and page-table rows from device tensors, so a graph can
    # replay it over new lengths once those tensors are static buffers. A padding row has length
    # 0: no split of it has keys, and the merge writes zeros.
    supports_cuda_graph = True

    def init_graph_buffers(self, max_bs: int) -> None:
        device = self.page_table.device
        self.graph_table_idx = torch.zeros(max_bs, dtype=torch.int32, device=device)
        self.graph_kv_lens = torch.zeros(max_bs, dtype=torch.int32, device=device)

    def prepare_for_capture(self, batch: Batch) -> None:
        bs = batch.size
        splits = self.kernels.choose_num_splits(bs, self.num_kv_heads, self.page_table.shape[1],
                                                self.page_table.device)
        batch.attn_metadata = TritonAttnMetadata(self.graph_table_idx[:bs],
                                                 self.graph_kv_lens[:bs], None, 1, splits)

    def prepare_for_replay(self, batch: Batch, padded_size: int) -> None:
        n = batch.size
        # Queued copies from pinned memory: a plain copy from a Python list would make the CPU
        # wait for the step in flight (overlap scheduling, chapter 16).
        copy_to_device(self.graph_table_idx[:n], [r.table_idx for r in batch.reqs])
        copy_to_device(self.graph_kv_lens[:n], [r.seq_len for r in batch.reqs])
        # Padding rows attend over nothing (and their page-table rows are never read); a length
        # left by an earlier, larger batch would make them attend over its keys for no use.
        self.graph_kv_lens[n:padded_size].zero_()

    # >>> ch24
    # Speculative verification (chapter 24): q new tokens in every row, so the extend kernel's
    # query offsets are fixed (0, q, 2q, ...) and its grid is (rows, q / BLOCK_M, heads); each
    # row's page-table row and length live in static buffers. A padding row attends over the
    # first q positions of row 0 (read, never written: its K/V go to the scratch slot).
    supports_verify_graph = True

    def init_verify_buffers(self, max_bs: int, q: int) -> None:
        device = self.page_table.device
        self.verify_table_idx = torch.zeros(max_bs, dtype=torch.int32, device=device)
        self.verify_kv_lens = torch.full((max_bs,), q, dtype=torch.int32, device=device)
        self.verify_cu_q_lens = torch.arange(0, (max_bs + 1) * q, q, dtype=torch.int32,
                                             device=device)

    def prepare_for_verify_capture(self, batch: Batch, q: int) -> None:
        bs = batch.size
        batch.attn_metadata = TritonAttnMetadata(self.verify_table_idx[:bs],
                                                 self.verify_kv_lens[:bs],
                                                 self.verify_cu_q_lens[: bs + 1], q, 1)

    def prepare_for_verify_replay(self, batch: Batch, padded_size: int, q: int) -> None:
        n = batch.size
        copy_to_device(self.verify_table_idx[:n], [r.table_idx for r in batch.reqs])
        copy_to_device(self.verify_kv_lens[:n], [r.cached_len + q for r in batch.reqs])
        self.verify_table_idx[n:padded_size].zero_()
        self.verify_kv_lens[n:padded_size].fill_(q)

    # <<< ch24
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        k_cache, v_cache = self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id)
        meta: TritonAttnMetadata = batch.attn_metadata
        if batch.is_prefill:
            self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
            return self.kernels.extend_attention(q, k_cache, v_cache, self.page_table,
                                                 meta.table_idx, meta.cu_q_lens, meta.kv_lens,
                                                 meta.max_q_len)
        # decode: the kernel stores the step's K/V itself (new_kv), one launch fewer per layer
        return self.kernels.decode_attention(q, k_cache, v_cache, self.page_table,
                                             meta.table_idx, meta.kv_lens,
                                             num_splits=meta.num_splits, workspace=self.workspace,
                                             new_kv=(k, v, batch.out_loc))
