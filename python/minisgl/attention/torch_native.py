"""Paged attention in plain torch: correct on CPU and GPU, and the reference for faster backends.

For every request it gathers the K/V rows of its whole sequence from the pool (through its page
table row), then runs scaled-dot-product attention of its new queries against them. A new token at
position p may only see keys at positions <= p; with a cached prefix of length c, the i-th new
query sits at position c + i. Decode batches (one new token per request, which sees everything)
are padded into one batched call instead of one call per request.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl.core import Batch, get_global_ctx

from .base import BaseAttnBackend


@dataclass
class TorchAttnMetadata:
    q_lens: list[int]  # new tokens per request
    kv_lens: list[int]  # cached + new tokens per request
    kv_slots: list[torch.Tensor]  # per request: pool slots of positions [0, kv_len)
    decode_slots: torch.Tensor | None  # decode only: [batch, max_kv_len] slots, padded
    decode_mask: torch.Tensor | None  # decode only: [batch, 1, 1, max_kv_len] valid keys


class TorchNativeBackend(BaseAttnBackend):
    def __init__(self, num_qo_heads: int, num_kv_heads: int) -> None:
        self.groups = num_qo_heads // num_kv_heads

    def prepare_metadata(self, batch: Batch) -> None:
        page_table = get_global_ctx().page_table
        q_lens = [r.extend_len for r in batch.reqs]
        kv_lens = [r.seq_len for r in batch.reqs]
        slots = [page_table[r.table_idx, :n].long() for r, n in zip(batch.reqs, kv_lens)]
        decode_slots = decode_mask = None
        if not batch.is_prefill:
            longest = max(kv_lens)
            decode_slots = torch.zeros(len(slots), longest, dtype=torch.long,
                                       device=page_table.device)
            for i, s in enumerate(slots):
                decode_slots[i, : len(s)] = s
            lens = torch.tensor(kv_lens, device=page_table.device)
            decode_mask = (torch.arange(longest, device=page_table.device) < lens[:, None])
            decode_mask = decode_mask[:, None, None, :]
        batch.attn_metadata = TorchAttnMetadata(q_lens, kv_lens, slots, decode_slots, decode_mask)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor:
        kv_cache = get_global_ctx().kv_cache
        kv_cache.store_kv(k, v, batch.out_loc, layer_id)
        k_cache, v_cache = kv_cache.k_cache(layer_id), kv_cache.v_cache(layer_id)
        meta: TorchAttnMetadata = batch.attn_metadata
        if not batch.is_prefill:
            return self._decode(q, k_cache, v_cache, meta)
        outputs, start = [], 0
        for q_len, kv_len, slots in zip(meta.q_lens, meta.kv_lens, meta.kv_slots):
            q_i = q[start : start + q_len]
            outputs.append(self._extend(q_i, k_cache[slots], v_cache[slots], kv_len - q_len))
            start += q_len
        return torch.cat(outputs)

    def _expand(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat_interleave(self.groups, dim=-3) if self.groups > 1 else x

    def _extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cached: int
                ) -> torch.Tensor:
        # q: [q_len, H, D], k/v: [kv_len, H_kv, D]; heads first for SDPA.
        q_pos = torch.arange(q.shape[0], device=q.device) + cached
        mask = torch.arange(k.shape[0], device=q.device)[None, :] <= q_pos[:, None]
        out = F.scaled_dot_product_attention(q.transpose(0, 1), self._expand(k.transpose(0, 1)),
                                             self._expand(v.transpose(0, 1)), attn_mask=mask)
        return out.transpose(0, 1)

    def _decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                meta: TorchAttnMetadata) -> torch.Tensor:
        # q: [B, H, D] -> [B, H, 1, D]; keys gathered as [B, H_kv, max_len, D].
        k = self._expand(k_cache[meta.decode_slots].transpose(1, 2))
        v = self._expand(v_cache[meta.decode_slots].transpose(1, 2))
        out = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, attn_mask=meta.decode_mask)
        return out.squeeze(2)
