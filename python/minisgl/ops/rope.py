"""Rotary position embedding of q and k, with Qwen3's per-head RMSNorm before it.

Each pair of channels (i, i + d/2) of a head is rotated by the angle position * inv_freq[i]
("neox" layout, as Hugging Face Llama/Qwen checkpoints expect); cos/sin come from the tables of
layers/rotary.py, one row per position.
"""

from __future__ import annotations

import torch

from .norm import rms_norm_torch
from .registry import Op


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [tokens, heads, head_dim]; cos/sin: [tokens, head_dim] already in x's dtype."""
    half = x.shape[-1] // 2
    rotated_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.unsqueeze(1) + rotated_half * sin.unsqueeze(1)


def rotate_qk(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor,
              sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k rotated to their tokens' positions (cos/sin: the whole fp32 tables)."""
    cos, sin = cos[positions].to(q.dtype), sin[positions].to(q.dtype)
    return rotate(q, cos, sin), rotate(k, cos, sin)


def rope_torch(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               num_qo_heads: int, num_kv_heads: int, head_dim: int,
               q_norm_weight: torch.Tensor | None, k_norm_weight: torch.Tensor | None,
               eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """q [tokens, qo_heads, head_dim] and k [tokens, kv_heads, head_dim] of the merged q|k|v
    projection, normalised per head when norm weights are given (Qwen3), then rotated."""
    q_size, kv_size = num_qo_heads * head_dim, num_kv_heads * head_dim
    if q_norm_weight is None:
        # q and k lie side by side in q|k|v: rotated as one tensor of qo + kv heads, half the ops
        # (a decode step on a CPU spends as much time calling small ops as computing them)
        qk = qkv[:, :q_size + kv_size].reshape(-1, num_qo_heads + num_kv_heads, head_dim)
        cos, sin = cos[positions].to(qk.dtype), sin[positions].to(qk.dtype)
        qk = rotate(qk, cos, sin)
        return qk[:, :num_qo_heads].contiguous(), qk[:, num_qo_heads:].contiguous()
    q = qkv[:, :q_size].reshape(-1, num_qo_heads, head_dim)
    k = qkv[:, q_size:q_size + kv_size].reshape(-1, num_kv_heads, head_dim)
    q, k = rms_norm_torch(q, q_norm_weight, eps), rms_norm_torch(k, k_norm_weight, eps)
    return rotate_qk(q, k, positions, cos, sin)


rope = Op("rope", rope_torch)
