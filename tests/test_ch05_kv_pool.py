"""Chapter 5: the KV pool and its two ops, against plain-Python references."""

from __future__ import annotations

import pytest
import torch

from minisgl import ops
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_store_cache_writes_rows_at_slots(dtype):
    gen = torch.Generator().manual_seed(0)
    slots, n, heads, dim = 50, 13, 3, 8
    k_cache = torch.randn(slots, heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(slots, heads, dim, generator=gen).to(dtype)
    before_k, before_v = k_cache.clone(), v_cache.clone()
    indices = torch.randperm(slots, generator=gen)[:n]
    k = torch.randn(n, heads, dim, generator=gen).to(dtype)
    v = torch.randn(n, heads, dim, generator=gen).to(dtype)
    ops.store_kv(k_cache, v_cache, indices, k, v)
    written = set(indices.tolist())
    for slot in range(slots):  # row by row, in Python: written rows hold k/v, the rest unchanged
        if slot in written:
            i = indices.tolist().index(slot)
            assert torch.equal(k_cache[slot], k[i]) and torch.equal(v_cache[slot], v[i])
        else:
            assert torch.equal(k_cache[slot], before_k[slot])
            assert torch.equal(v_cache[slot], before_v[slot])


@pytest.mark.parametrize("start,length", [(0, 100), (40, 30), (0, 25), (75, 25)])
def test_indexing_masks_ids_outside_the_shard(start, length):
    gen = torch.Generator().manual_seed(1)
    shard = torch.randn(length, 16, generator=gen) - 3  # negative values: zeros must be +0.0
    ids = torch.randint(0, 100, (40,), generator=gen)
    out = ops.embedding(shard, ids, start, length)
    for i, token in enumerate(ids.tolist()):
        if start <= token < start + length:
            assert torch.equal(out[i], shard[token - start])
        else:
            assert torch.equal(out[i], torch.zeros(16)) and not torch.signbit(out[i]).any()


def test_pool_layout_and_views():
    cfg = KVPoolConfig(num_layers=4, num_kv_heads=2, head_dim=8, num_pages=10, page_size=4,
                       dtype=torch.bfloat16, device=torch.device("cpu"))
    pool = MHAKVCache(cfg)
    assert cfg.num_slots == 40 and cfg.bytes_per_token == 2 * 4 * 2 * 8 * 2
    assert pool.k_cache(3).shape == (40, 2, 8)
    k, v = torch.randn(3, 2, 8).bfloat16(), torch.randn(3, 2, 8).bfloat16()
    loc = torch.tensor([5, 0, 39])
    pool.store_kv(k, v, loc, layer_id=2)
    assert torch.equal(pool.k_cache(2)[loc], k) and torch.equal(pool.v_cache(2)[loc], v)
    # layers are separate memory: writing layer 2 leaves layer 1's rows as they were
    pool.k_cache(1).fill_(7)
    pool.store_kv(k + 1, v + 1, loc, layer_id=2)
    assert (pool.k_cache(1) == 7).all()
