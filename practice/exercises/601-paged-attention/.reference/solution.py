"""Reference solution of exercise 601 (the torch backend's way: GQA heads as extra query rows)."""

import torch
import torch.nn.functional as F


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    slots: torch.Tensor) -> torch.Tensor:
    q_len, num_heads, head_dim = q.shape
    k, v = k_cache[slots], v_cache[slots]  # [kv_len, Hkv, D]
    kv_len, num_kv_heads = k.shape[0], k.shape[1]
    groups = num_heads // num_kv_heads
    q_pos = torch.arange(q_len) + (kv_len - q_len)
    mask = torch.arange(kv_len)[None, :] <= q_pos[:, None]  # [q_len, kv_len]
    q = q.view(q_len, num_kv_heads, groups, head_dim).permute(1, 2, 0, 3).flatten(1, 2)
    out = F.scaled_dot_product_attention(q, k.transpose(0, 1), v.transpose(0, 1),
                                         attn_mask=mask.repeat(groups, 1))
    return out.view(num_kv_heads, groups, q_len, head_dim).permute(2, 0, 1, 3).flatten(1, 2)
