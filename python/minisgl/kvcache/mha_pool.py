"""The paged KV pool: one big K tensor and one big V tensor per layer, allocated once.

Memory is handed out in pages of `page_size` token slots. A token's K/V row lives at slot
`page * page_size + offset`; the page table (chapter 8) records, for every request and position,
which slot holds that token. Attention then reads a request's K/V by gathering its slots, so a
request never needs contiguous memory and freed pages can be reused by anyone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl import ops


@dataclass(frozen=True)
class KVPoolConfig:
    num_layers: int
    num_kv_heads: int
    head_dim: int
    num_pages: int
    page_size: int
    dtype: torch.dtype
    device: torch.device

    @property
    def num_slots(self) -> int:
        return self.num_pages * self.page_size

    @property
    def bytes_per_token(self) -> int:
        """K and V of one token across all layers."""
        elem = torch.empty(0, dtype=self.dtype).element_size()
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * elem


class MHAKVCache:
    """K/V storage for multi-head (and grouped-query) attention."""

    def __init__(self, config: KVPoolConfig) -> None:
        self.config = config
        shape = (2, config.num_layers, config.num_slots, config.num_kv_heads, config.head_dim)
        self._buffer = torch.empty(shape, dtype=config.dtype, device=config.device)

    def k_cache(self, layer_id: int) -> torch.Tensor:
        return self._buffer[0, layer_id]  # [slots, kv_heads, head_dim]

    def v_cache(self, layer_id: int) -> torch.Tensor:
        return self._buffer[1, layer_id]

    def store_kv(self, k: torch.Tensor, v: torch.Tensor, out_loc: torch.Tensor,
                 layer_id: int) -> None:
        """k, v: [tokens, kv_heads, head_dim] written at slots out_loc [tokens]."""
        ops.store_kv(self.k_cache(layer_id), self.v_cache(layer_id), out_loc, k, v)
