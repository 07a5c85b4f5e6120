"""Paged attention in plain torch: correct on CPU and GPU, and the reference for faster backends.

For every request it gathers the K/V rows of its whole sequence from the pool (through its page
table row), then runs scaled-dot-product attention of its new queries against them. A new token at
position p may only see keys at positions <= p; with a cached prefix of length c, the i-th new
query sits at position c + i. Decode batches (one new token per request, which sees everything)
run as a few padded batched calls instead of one call per request: requests are sorted by length
and grouped so that padding wastes little. Grouped-query attention never copies K/V per query
head: in decode the query heads that share a KV head are stacked as extra query rows; in prefill
K/V are expanded over those heads as a stride-0 view, so SDPA's fused (flash) CPU kernel applies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl.core import Batch
from minisgl.kvcache.mha_pool import MHAKVCache

from .base import BaseAttnBackend


@dataclass
class DecodeGroup:
    """Decode requests of similar length, attended in one padded call."""

    rows: torch.Tensor  # [g] positions of these requests in the batch
    slots: torch.Tensor  # [g * max_len] their KV slots, padded with slot 0
    mask: torch.Tensor  # [g, 1, 1, max_len] which keys are real
    buffer: torch.Tensor  # [2, g * max_len, kv_heads * head_dim] gathered K and V
    whole_batch: bool  # the group is the whole batch in its order: q needs no gather, out no scatter
    # One buffer for all layers: each layer's gather is consumed before the next layer runs.
    # (index_select into it is several times faster than advanced indexing on a CPU.)


@dataclass
class TorchAttnMetadata:
    q_lens: list[int]  # new tokens per request
    kv_lens: list[int]  # cached + new tokens per request
    kv_slots: list[torch.Tensor]  # per request: pool slots of positions [0, kv_len)
    decode_groups: list[DecodeGroup]  # decode batches only


MAX_PADDING = 1.25  # a decode group's longest request is at most this times its shortest


class TorchNativeBackend(BaseAttnBackend):
    def __init__(self, kv_cache: MHAKVCache, page_table: torch.Tensor, num_qo_heads: int,
                 num_kv_heads: int) -> None:
        super().__init__(kv_cache, page_table, num_qo_heads, num_kv_heads)
        self.groups = num_qo_heads // num_kv_heads  # query heads per KV head

    def prepare_metadata(self, batch: Batch) -> None:
        q_lens = [r.extend_len for r in batch.reqs]
        kv_lens = [r.seq_len for r in batch.reqs]
        slots = [self.page_table[r.table_idx, :n].long() for r, n in zip(batch.reqs, kv_lens)]
        meta = TorchAttnMetadata(q_lens, kv_lens, slots, [])
        if not batch.is_prefill:
            meta.decode_groups = self._decode_groups(meta, self.page_table.device)
        batch.attn_metadata = meta

    def _decode_groups(self, meta: TorchAttnMetadata, device: torch.device
                       ) -> list[DecodeGroup]:
        order = sorted(range(len(meta.kv_lens)), key=lambda i: meta.kv_lens[i])
        groups, current = [], [order[0]]
        for i in order[1:]:
            if meta.kv_lens[i] > MAX_PADDING * meta.kv_lens[current[0]]:
                groups.append(current)
                current = []
            current.append(i)
        groups.append(current)
        return [self._decode_group(meta, rows, device) for rows in groups]

    def _decode_group(self, meta: TorchAttnMetadata, rows: list[int], device: torch.device
                      ) -> DecodeGroup:
        longest = meta.kv_lens[rows[-1]]
        padded = torch.zeros(len(rows), longest, dtype=torch.long, device=device)
        for j, i in enumerate(rows):
            padded[j, : meta.kv_lens[i]] = meta.kv_slots[i]
        lens = torch.tensor([meta.kv_lens[i] for i in rows], device=device)
        mask = (torch.arange(longest, device=device) < lens[:, None])[:, None, None]
        k_cache = self.kv_cache.k_cache(0)
        buffer = torch.empty(2, padded.numel(), k_cache[0].numel(), dtype=k_cache.dtype,
                             device=device)
        return DecodeGroup(torch.tensor(rows, device=device), padded.flatten(), mask, buffer,
                           whole_batch=rows == list(range(len(meta.kv_lens))))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        self.kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache, v_cache = self.kv_cache.k_cache(layer_id), self.kv_cache.v_cache(layer_id)
        meta: TorchAttnMetadata = batch.attn_metadata
        if not batch.is_prefill:
            return self._decode(q, k_cache, v_cache, meta)
        outputs, start = [], 0
        for q_len, kv_len, slots in zip(meta.q_lens, meta.kv_lens, meta.kv_slots):
            end = start + q_len
            if kv_len == q_len:  # nothing cached: this step's k and v are the whole sequence
                outputs.append(self._causal(q[start:end], k[start:end], v[start:end]))
            else:
                outputs.append(self._extend(q[start:end], k_cache[slots], v_cache[slots],
                                            kv_len - q_len))
            start = end
        return torch.cat(outputs)

    def _causal(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """A whole new sequence: plain causal attention. q: [T, H, D], k/v: [T, H_kv, D]."""
        q, k, v = self._gqa_layout(q, k, v)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [H_kv, G, T, D]
        return out.permute(2, 0, 1, 3).flatten(1, 2)

    def _extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cached: int
                ) -> torch.Tensor:
        """q: [q_len, H, D], k/v: [kv_len, H_kv, D] for one request -> [q_len, H, D]."""
        q_len, kv_len = q.shape[0], k.shape[0]
        q_pos = torch.arange(q_len, device=q.device) + cached
        mask = torch.arange(kv_len, device=q.device)[None, :] <= q_pos[:, None]
        q, k, v = self._gqa_layout(q, k, v)
        # One [q_len, kv_len] mask broadcast over every head (a copy per head costs time too).
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [H_kv, G, q_len, D]
        return out.permute(2, 0, 1, 3).flatten(1, 2)

    def _gqa_layout(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q: [q_len, H, D] -> [H_kv, G, q_len, D]; k/v: [kv_len, H_kv, D] -> [H_kv, G, kv_len, D]
        with the G query heads of a KV head side by side.

        K/V are expanded over G as a stride-0 view (no copy). A size-1 G dimension left to
        broadcast would be shorter to write, but then SDPA on a CPU takes its math fallback,
        which materialises [H, q_len, kv_len] scores: for an 8k-token prompt that is 2.4 GB and
        several times the time per layer (measured 5x at 2k tokens)."""
        q_len, heads = q.shape[0], k.shape[1]
        q = q.view(q_len, heads, self.groups, -1).permute(1, 2, 0, 3)
        k = k.transpose(0, 1).unsqueeze(1).expand(-1, self.groups, -1, -1)
        v = v.transpose(0, 1).unsqueeze(1).expand(-1, self.groups, -1, -1)
        return q, k, v

    def _decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: TorchAttnMetadata) -> torch.Tensor:
        """q: [B, H, D], one new token per request, each seeing its whole sequence."""
        if len(meta.decode_groups) == 1 and meta.decode_groups[0].whole_batch:
            return self._decode_group_attention(q, k_cache, v_cache, meta.decode_groups[0])
        out = torch.empty_like(q)  # groups hold requests in length order: scatter back by row
        for group in meta.decode_groups:
            out[group.rows] = self._decode_group_attention(q[group.rows], k_cache, v_cache, group)
        return out

    def _decode_group_attention(self, q: torch.Tensor, k_cache: torch.Tensor,
                                v_cache: torch.Tensor, group: DecodeGroup) -> torch.Tensor:
        size, heads = q.shape[0], k_cache.shape[1]
        k_buf, v_buf = group.buffer
        torch.index_select(k_cache.flatten(1), 0, group.slots, out=k_buf)
        torch.index_select(v_cache.flatten(1), 0, group.slots, out=v_buf)
        k = k_buf.view(size, -1, heads, k_cache.shape[2]).transpose(1, 2)  # [g, H_kv, L, D]
        v = v_buf.view(size, -1, heads, v_cache.shape[2]).transpose(1, 2)
        q = q.view(size, heads, self.groups, -1)  # the group's heads as query rows
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=group.mask)
        return out.flatten(1, 2)
