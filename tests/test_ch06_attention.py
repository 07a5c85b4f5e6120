"""Chapter 6: paged attention (prefill with a cached prefix, and decode) against dense attention."""

from __future__ import annotations

import pytest
import torch

from minisgl.attention import TorchNativeBackend, create_attn_backend
from minisgl.core import Batch, Req, SamplingParams
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache

NQ, NKV, D = 6, 2, 16


def _dense_attention(q, k, v, q_positions):
    """q: [tq, H, D] at absolute positions q_positions; k/v: [tk, Hkv, D] at 0..tk-1."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / D ** 0.5
    visible = torch.arange(k.shape[0])[None, :] <= q_positions[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


@pytest.fixture
def setup():
    pool = MHAKVCache(KVPoolConfig(num_layers=2, num_kv_heads=NKV, head_dim=D, num_pages=64,
                                   page_size=1, dtype=torch.float32, device=torch.device("cpu")))
    page_table = torch.zeros(4, 64, dtype=torch.int32)
    backend = TorchNativeBackend(pool, page_table, NQ, NKV)
    return pool, page_table, backend


CASES = {
    "prefill": [(5, 7), (0, 9), (12, 3)],
    "decode-lengths-far-apart": [(9, 1), (1, 1), (20, 1)],  # one padded group each
    "decode-similar-lengths-unsorted": [(12, 1), (10, 1), (11, 1)],  # one group, reordered
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_paged_attention_equals_dense(setup, case):
    pool, page_table, backend = setup
    phase = case.split("-")[0]
    gen = torch.Generator().manual_seed(3)
    slots = torch.randperm(64, generator=gen).int()  # scattered, not contiguous, slots
    lens = CASES[case]
    reqs, used = [], 0
    full_k, full_v = [], []
    for row, (cached, new) in enumerate(lens):
        total = cached + new
        page_table[row, :total] = slots[used : used + total]
        used += total
        req = Req(uid=row, input_ids=[0] * total, sampling_params=SamplingParams(),
                  table_idx=row, cached_len=cached, extend_len=new)
        k, v = torch.randn(total, NKV, D, generator=gen), torch.randn(total, NKV, D, generator=gen)
        pool.store_kv(k[:cached], v[:cached], page_table[row, :cached].long(), layer_id=1)
        reqs.append(req)
        full_k.append(k)
        full_v.append(v)
    batch = Batch(reqs, phase)
    batch.out_loc = torch.cat([page_table[r.table_idx, r.cached_len : r.seq_len].long()
                               for r in reqs])
    backend.prepare_metadata(batch)
    q = torch.randn(sum(n for _, n in lens), NQ, D, generator=gen)
    new_k = torch.cat([k[c:] for k, (c, _) in zip(full_k, lens)])
    new_v = torch.cat([v[c:] for v, (c, _) in zip(full_v, lens)])
    out = backend.forward(q, new_k, new_v, layer_id=1, batch=batch)
    start = 0
    for (cached, new), k, v in zip(lens, full_k, full_v):
        expected = _dense_attention(q[start : start + new], k, v, torch.arange(cached, cached + new))
        torch.testing.assert_close(out[start : start + new], expected, rtol=1e-5, atol=1e-5)
        start += new
    # the new K/V rows are now in the pool at their slots
    torch.testing.assert_close(pool.k_cache(1)[batch.out_loc], new_k)


def test_factory_builds_backends_by_name_on_the_pool_and_page_table(setup):
    pool, page_table, _ = setup
    for name in ("torch", "auto"):  # auto: torch until a faster backend exists for the device
        backend = create_attn_backend(name, pool, page_table, NQ, NKV)
        assert isinstance(backend, TorchNativeBackend)
        assert backend.kv_cache is pool and backend.page_table is page_table
    with pytest.raises(ValueError, match="unknown attention backend 'flash'"):
        create_attn_backend("flash", pool, page_table, NQ, NKV)
    with pytest.raises(ValueError, match="cannot share"):
        create_attn_backend("torch", pool, page_table, 5, NKV)


def test_prefill_attention_runs_the_fused_kernel_not_the_math_fallback(setup):
    """With a size-1 head dimension left to broadcast, SDPA on a CPU falls back to its math
    kernel, which builds the whole [H, q_len, kv_len] score matrix: 2.4 GB per layer for one
    8k-token prompt, and minutes of prefill (issue 28). Both prefill paths, a new sequence
    and one after a cached prefix, must reach the fused kernel."""
    pool, page_table, backend = setup
    gen = torch.Generator().manual_seed(4)
    reqs = []
    for row, (cached, new) in enumerate([(0, 20), (12, 8)]):
        page_table[row, : cached + new] = torch.arange(cached + new) + 32 * row
        reqs.append(Req(uid=row, input_ids=[0] * (cached + new), sampling_params=SamplingParams(),
                        table_idx=row, cached_len=cached, extend_len=new))
    batch = Batch(reqs, "prefill")
    batch.out_loc = torch.cat([page_table[r.table_idx, r.cached_len : r.seq_len].long()
                               for r in reqs])
    backend.prepare_metadata(batch)
    q = torch.randn(28, NQ, D, generator=gen)
    k, v = torch.randn(28, NKV, D, generator=gen), torch.randn(28, NKV, D, generator=gen)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        backend.forward(q, k, v, layer_id=0, batch=batch)
    ops = {event.key for event in prof.key_averages()}
    assert "aten::_scaled_dot_product_attention_math" not in ops
    assert sum(event.count for event in prof.key_averages()
               if event.key == "aten::_scaled_dot_product_flash_attention_for_cpu") == 2
