"""The attention layer of a decoder: q/k normalisation (Qwen3), RoPE, then attention itself.

Without an engine (chapters 2-4) there is no memory of earlier steps: the layer sees the whole
sequence every time and runs causal attention over it. Inside the engine's forward pass (chapter 6
on) the global context holds the batch, and the attention backend stores the new K/V in the paged
pool and attends over each request's cached prefix too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.core import get_global_ctx

from minisgl.kernel import triton_for

from minisgl.trace.runtime import traced

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
            out = ctx.attn_backend.forward(q, k, v, self.layer_id, ctx.batch)
            return out.reshape(-1, q_size)
        # <<< ch06
        return self._causal_attention(q, k, v).reshape(-1, q_size)

    @traced("rope")
    def _qkv_normed_and_rotated(self, qkv: torch.Tensor, positions: torch.Tensor
                                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q, k, v as [tokens, heads, head_dim]; q and k normalised per head (Qwen3), then
        rotated."""
        q_size, kv_size = self.num_qo_heads * self.head_dim, self.num_kv_heads * self.head_dim
        # >>> ch20
        if (fused := triton_for(qkv)) is not None:  # on a GPU: one Triton kernel (chapter 20)
            qk_norm = hasattr(self, "q_norm")
            q, k = fused.qk_norm_rope(qkv, positions, self._rotary._cos, self._rotary._sin,
                                      self.num_qo_heads, self.num_kv_heads, self.head_dim,
                                      self.q_norm.weight if qk_norm else None,
                                      self.k_norm.weight if qk_norm else None,
                                      self.q_norm.eps if qk_norm else 0.0)
            return q, k, qkv[:, q_size + kv_size:].view(-1, self.num_kv_heads, self.head_dim)
        # <<< ch20
        q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.reshape(-1, self.num_qo_heads, self.head_dim)
        k = k.reshape(-1, self.num_kv_heads, self.head_dim)
        v = v.reshape(-1, self.num_kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm.forward(q), self.k_norm.forward(k)
        q, k = self._rotary.forward(positions, q, k)
        return q, k, v

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
