"""The attention layer of a decoder: q/k normalisation (Qwen3), RoPE, then attention itself.

Without an engine (chapters 2-4) there is no memory of earlier steps: the layer sees the whole
sequence every time and runs causal attention over it. Inside the engine's forward pass (chapter 6
on) the global context holds the batch, and the attention backend stores the new K/V in the paged
pool and attends over each request's cached prefix too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl import ops
from minisgl.core import get_global_ctx

from .base import BaseOP
from .norm import RMSNorm
from .rotary import RotaryEmbedding


class AttentionLayer(BaseOP):
    def __init__(self, layer_id: int, num_qo_heads: int, num_kv_heads: int, head_dim: int,
                 rotary: RotaryEmbedding, q_norm: RMSNorm | None = None,
                 k_norm: RMSNorm | None = None) -> None:
        self.layer_id = layer_id  # which layer's slice of the KV cache it will use (chapter 6)
        self.num_qo_heads = num_qo_heads
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self._rotary = rotary  # shared by all layers, and not a weight
        if q_norm is not None and k_norm is not None:
            self.q_norm, self.k_norm = q_norm, k_norm  # names as in Qwen3 checkpoints

    def forward(self, qkv: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """qkv: [tokens, (qo_heads + 2 * kv_heads) * head_dim] -> [tokens, qo_heads * head_dim]."""
        q_size = self.num_qo_heads * self.head_dim
        q, k, v = self._qkv_normed_and_rotated(qkv, positions)
        # >>> ch06
        ctx = get_global_ctx()
        if ctx is not None and ctx.batch is not None:
            out = ops.attention(ctx.attn_backend, q, k, v, self.layer_id, ctx.batch)
            return out.reshape(-1, q_size)
        # <<< ch06
        return self._causal_attention(q, k, v).reshape(-1, q_size)

    def _qkv_normed_and_rotated(self, qkv: torch.Tensor, positions: torch.Tensor
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as [tokens, heads, head_dim]; q and k normalised per head (Qwen3), then
        rotated."""
        qk_norm = hasattr(self, "q_norm")
        q, k = ops.rope(qkv, positions, self._rotary._cos, self._rotary._sin, self.num_qo_heads,
                        self.num_kv_heads, self.head_dim,
                        self.q_norm.weight if qk_norm else None,
                        self.k_norm.weight if qk_norm else None,
                        self.q_norm.eps if qk_norm else 0.0)
        v_start = (self.num_qo_heads + self.num_kv_heads) * self.head_dim
        return q, k, qkv[:, v_start:].view(-1, self.num_kv_heads, self.head_dim)

    def _causal_attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
                          ) -> torch.Tensor:
        # One sequence: [tokens, heads, dim] -> [heads, tokens, dim] for SDPA. Grouped-query
        # attention: each group of qo heads shares one kv head.
        groups = self.num_qo_heads // self.num_kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                             v.transpose(0, 1), is_causal=True)
        return out.transpose(0, 1)
