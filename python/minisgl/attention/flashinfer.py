"""Paged attention with FlashInfer's kernels (chapter 23): a third-party peer for the trace loop.

FlashInfer is optional (`pip install flashinfer-python`; it compiles its kernels on first use with
the CUDA toolkit). This backend exists so that `apply` can pick FlashInfer's attention when the
benchmark finds it faster, and so that an engineer can run `--attn flashinfer` beside `--attn
triton` on the same engine. Nothing chooses it by default.

FlashInfer splits the work differently from our Triton backend. Its wrappers `plan()` once per
batch on the CPU (how each request's keys are cut into chunks, which thread block does what) from
host copies of the lengths, then every layer's `run()` only launches kernels. Our page table maps
each position to a token slot, which is FlashInfer's paged layout with pages of one token: the
indices of a request are its page-table row up to its length.

`plan()` copies its schedule to the GPU from one pinned host buffer per wrapper, without waiting.
A second plan() must not overwrite that buffer before the first copy ran, so each plan waits for
the event recorded after the previous one: with overlap scheduling (chapter 16) that copy sits
behind the previous step's kernels, which have usually finished by the time the next batch is
planned.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import torch

from minisgl.core import Batch
from minisgl.kvcache.mha_pool import MHAKVCache
from minisgl.utils.transfer import to_device

from .base import BaseAttnBackend

WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended split-KV scratch space, shared by wrappers
KERNELS = "fa2"  # FlashInfer's own FA3 path is slower on Hopper for these shapes (and compiles long)


def flashinfer_module() -> Any:
    """`import flashinfer`, with an error that says what to do when it is missing."""
    try:
        import flashinfer
    except ImportError as e:
        raise ImportError("attention backend 'flashinfer' needs FlashInfer: pip install "
                          "flashinfer-python (optional; the engine's own backends do not need "
                          f"it): {e}") from e
    return flashinfer


def decode_wrapper(fi: Any, workspace: torch.Tensor, num_qo_heads: int, num_kv_heads: int,
                   **graph_buffers: torch.Tensor) -> Any:
    """FlashInfer's paged decode over NHD pages; with graph_buffers (paged_kv_*_buffer) the
    wrapper a CUDA graph can replay. Tensor cores pay off, FlashInfer advises, once 4 or more
    query heads share a KV head (Qwen3-0.6B has 2, Qwen3-8B 4)."""
    return fi.BatchDecodeWithPagedKVCacheWrapper(
        workspace, "NHD", use_cuda_graph=bool(graph_buffers),
        use_tensor_cores=num_qo_heads // num_kv_heads >= 4, backend=KERNELS, **graph_buffers)


def prefill_wrapper(fi: Any, workspace: torch.Tensor) -> Any:
    return fi.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD", backend=KERNELS)


def pinned(values: list[int]) -> torch.Tensor:
    """A fresh page-locked int32 host tensor: plan() reads lengths on the host and copies from
    here to the GPU without making the CPU wait (a pageable source would)."""
    return torch.tensor(values, dtype=torch.int32).pin_memory()


@dataclass
class FlashInferMetadata:
    wrapper: Any  # the planned FlashInfer wrapper whose run() each layer calls


class FlashInferBackend(BaseAttnBackend):
    def __init__(self, kv_cache: MHAKVCache, page_table: torch.Tensor, num_qo_heads: int,
                 num_kv_heads: int) -> None:
        super().__init__(kv_cache, page_table, num_qo_heads, num_kv_heads)
        if not page_table.is_cuda:
            raise ValueError("attention backend 'flashinfer' runs on a GPU only "
                             "(on a CPU use --attn auto, cpu or torch)")
        if kv_cache.config.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError("attention backend 'flashinfer' needs a bfloat16 or float16 KV pool "
                             f"(FlashInfer has no {kv_cache.config.dtype} kernels): --dtype auto")
        self.fi = flashinfer_module()
        self.device = page_table.device
        self.head_dim = kv_cache.config.head_dim
        self.dtype = kv_cache.config.dtype
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
        self.decode = decode_wrapper(self.fi, self.workspace, num_qo_heads, num_kv_heads)
        self.prefill = prefill_wrapper(self.fi, self.workspace)
        self.graph_wrappers: dict[int, Any] = {}  # captured batch size -> its decode wrapper
        self.planned = torch.cuda.Event()
        self.planned.record()

    # ------------------------------------------------------------------ the index arrays
    def kv_indices(self, reqs: list, starts: list[int], lens: list[int]) -> torch.Tensor:
        """The token slots of every request's sequence, one after another: page_table[row,
        :len] of each request, gathered on the GPU in a few launches whatever the batch size."""
        total = sum(lens)
        rows = to_device([r.table_idx for r in reqs], torch.int64, self.device)
        lens_d = to_device(lens, torch.int64, self.device)
        first = to_device(starts, torch.int64, self.device)
        row = torch.repeat_interleave(rows, lens_d, output_size=total)
        pos = (torch.arange(total, device=self.device)
               - torch.repeat_interleave(first, lens_d, output_size=total))
        return self.page_table[row, pos]

    def plan(self, wrapper: Any, batch_lens: list[int], indices: torch.Tensor,
             q_lens: list[int] | None = None) -> None:
        self.planned.synchronize()  # the previous plan's copy has left the pinned buffer
        indptr = pinned([0, *accumulate(batch_lens)])
        last_page_len = pinned([1] * len(batch_lens))  # pages of one token are always full
        common = {"num_qo_heads": self.num_qo_heads, "num_kv_heads": self.num_kv_heads,
                  "page_size": 1, "q_data_type": self.dtype, "kv_data_type": self.dtype,
                  "seq_lens": pinned(batch_lens), "non_blocking": True}
        if q_lens is None:
            wrapper.plan(indptr, indices, last_page_len, head_dim=self.head_dim, **common)
        else:
            wrapper.plan(pinned([0, *accumulate(q_lens)]), indptr, indices, last_page_len,
                         head_dim_qk=self.head_dim, causal=True, **common)
        self.planned.record()

    # ------------------------------------------------------------------ eager batches
    def prepare_metadata(self, batch: Batch) -> None:
        lens = [r.seq_len for r in batch.reqs]
        indices = self.kv_indices(batch.reqs, [0, *accumulate(lens)][:-1], lens)
        if batch.is_prefill:
            # causal=True aligns each request's queries with the end of its keys: new tokens
            # see the cached prefix and the new tokens before them
            self.plan(self.prefill, lens, indices, [r.extend_len for r in batch.reqs])
            batch.attn_metadata = FlashInferMetadata(self.prefill)
        else:
            self.plan(self.decode, lens, indices)
            batch.attn_metadata = FlashInferMetadata(self.decode)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        # [slots, kv_heads, D] is FlashInfer's NHD layout with one token per page
        pages = (self.kv_cache.k_cache(layer_id).unsqueeze(1),
                 self.kv_cache.v_cache(layer_id).unsqueeze(1))
        meta: FlashInferMetadata = batch.attn_metadata
        return meta.wrapper.run(q, pages)

    # ------------------------------------------------------------------ CUDA graphs (ch. 15)
    # A graph replays the kernels with the launch shapes they were recorded with, so each
    # captured batch size gets its own decode wrapper over static buffers (use_cuda_graph=True);
    # before a replay, plan() writes the real batch's indices and schedule into them.
    supports_cuda_graph = True

    def init_graph_buffers(self, max_bs: int) -> None:
        self.graph_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=self.device)
        self.graph_last_page_len = torch.ones(max_bs, dtype=torch.int32, device=self.device)
        self.graph_indices = torch.zeros(max_bs * self.page_table.shape[1], dtype=torch.int32,
                                         device=self.device)

    def prepare_for_capture(self, batch: Batch) -> None:
        bs = batch.size
        wrapper = decode_wrapper(self.fi, self.workspace, self.num_qo_heads, self.num_kv_heads,
                                 paged_kv_indptr_buffer=self.graph_indptr[:bs + 1],
                                 paged_kv_indices_buffer=self.graph_indices,
                                 paged_kv_last_page_len_buffer=self.graph_last_page_len[:bs])
        self.graph_wrappers[bs] = wrapper
        self.plan_padded(wrapper, [], [], bs)
        batch.attn_metadata = FlashInferMetadata(wrapper)

    def prepare_for_replay(self, batch: Batch, padded_size: int) -> None:
        lens = [r.seq_len for r in batch.reqs]
        self.plan_padded(self.graph_wrappers[padded_size], batch.reqs, lens, padded_size)

    def plan_padded(self, wrapper: Any, reqs: list, lens: list[int], padded_size: int) -> None:
        """Plan the real rows, then padding rows of one key each (slot 0: any slot will do, the
        rows' outputs are dropped), so the schedule has the captured batch size."""
        pad = padded_size - len(lens)
        starts = [0, *accumulate(lens)][:-1]
        real = self.kv_indices(reqs, starts, lens) if reqs else None
        zeros = torch.zeros(pad, dtype=torch.int32, device=self.device)
        indices = zeros if real is None else torch.cat([real, zeros])
        self.plan(wrapper, lens + [1] * pad, indices)
