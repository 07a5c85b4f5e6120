"""Exercise 601: causal attention of one request's new tokens over its paged K/V."""

import torch


def paged_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    slots: torch.Tensor) -> torch.Tensor:
    # TODO 1: 用 slots 从 k_cache / v_cache 里取出这个请求位置 [0, kv_len) 的 K、V
    # TODO 2: cached = kv_len - q_len；第 i 个新 token 的位置是 cached + i，只能看到位置 <= 它的 key
    # TODO 3: GQA：第 h 个 query 头用第 h // (Hq // Hkv) 个 KV 头
    # TODO 4: softmax(q · k / sqrt(D)) · v，返回 [q_len, Hq, D]
    return torch.zeros_like(q)  # 现在只返回全 0
