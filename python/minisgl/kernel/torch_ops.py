"""The reference implementation of every kernel op, in plain torch. Runs on CPU and GPU.

Faster versions (the CUDA extension of chapter 19) must give exactly these results.
"""

from __future__ import annotations

import torch


def store_cache(k_cache: torch.Tensor, v_cache: torch.Tensor, indices: torch.Tensor,
                k: torch.Tensor, v: torch.Tensor) -> None:
    """k_cache[indices[i]] = k[i] and v_cache[indices[i]] = v[i] for every new token i.

    k_cache, v_cache: [slots, kv_heads, head_dim]; k, v: [tokens, kv_heads, head_dim].
    """
    indices = indices.long()  # index_copy_ takes int64 only
    k_cache.index_copy_(0, indices, k)  # same result as k_cache[indices] = k, but faster on CPU
    v_cache.index_copy_(0, indices, v)


def indexing(weight: torch.Tensor, ids: torch.Tensor, start: int = 0,
             length: int | None = None) -> torch.Tensor:
    """out[i] = weight[ids[i] - start] for ids inside [start, start + length), zeros elsewhere.

    With the vocabulary split across ranks (tensor parallelism), each rank holds rows
    [start, start + length) and the all-reduce of the zero-padded outputs gives full embeddings.
    """
    if start == 0 and length is None:
        return weight[ids.long()]  # not sharded: a plain lookup (an id past the end is an error)
    length = weight.shape[0] if length is None else length
    local = ids.long() - start
    valid = (local >= 0) & (local < length)
    out = weight[local.clamp(0, length - 1)]
    out[~valid] = 0  # exact +0.0 bits, as the CUDA kernel writes (x * 0 could give -0.0)
    return out
