"""Chapter 20: the Triton attention backend gives what the torch backend gives, one layer call at a
time and through the whole engine (scheduler, radix prefix cache, chunked prefill, decode) on a
tiny random Qwen3 model, in fp32. On a CPU the kernels run under Triton's interpreter.
"""

from __future__ import annotations

import torch
from test_ch03_models import save_random_hf_model
from test_ch08_scheduler import make_scheduler, run_all

from minisgl.attention import TorchNativeBackend, TritonBackend, create_attn_backend
from minisgl.core import Batch, Req, SamplingParams
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache

NQ, NKV, D = 6, 2, 16
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def random_pool(gen: torch.Generator) -> MHAKVCache:
    pool = MHAKVCache(KVPoolConfig(num_layers=2, num_kv_heads=NKV, head_dim=D, num_pages=40,
                                   page_size=4, dtype=torch.float32, device=torch.device(DEVICE)))
    k, v = torch.randn(160, NKV, D, generator=gen), torch.randn(160, NKV, D, generator=gen)
    pool.store_kv(k.to(DEVICE), v.to(DEVICE), torch.arange(160, device=DEVICE), layer_id=1)
    return pool


def test_one_layer_call_equals_torch_backend():
    """Same pool contents, page table and batch: equal outputs and equal pools afterwards."""
    pool, torch_pool = random_pool(torch.Generator().manual_seed(0)), \
        random_pool(torch.Generator().manual_seed(0))
    gen = torch.Generator().manual_seed(1)
    page_table = torch.randperm(160, generator=gen).int().view(4, 40).to(DEVICE)  # shuffled
    backends = {"triton": create_attn_backend("triton", pool, page_table, NQ, NKV),
                "torch": create_attn_backend("torch", torch_pool, page_table, NQ, NKV)}
    assert isinstance(backends["triton"], TritonBackend)
    assert isinstance(backends["torch"], TorchNativeBackend)
    # (row, cached, new): a prefix hit, no prefix, one new token; then a decode batch
    for phase, lens in (("prefill", [(2, 13, 9), (0, 0, 21), (3, 30, 1)]),
                        ("decode", [(1, 39, 1), (3, 4, 1), (0, 17, 1)])):
        reqs = [Req(uid=i, input_ids=[0] * (c + n), sampling_params=SamplingParams(),
                    table_idx=row, cached_len=c, extend_len=n)
                for i, (row, c, n) in enumerate(lens)]
        batch = Batch(reqs, phase)
        batch.out_loc = torch.cat([page_table[r.table_idx, r.cached_len : r.seq_len].long()
                                   for r in reqs])
        tokens = len(batch.out_loc)
        q = torch.randn(tokens, NQ, D, generator=gen).to(DEVICE)
        k = torch.randn(tokens, NKV, D, generator=gen).to(DEVICE)
        v = torch.randn(tokens, NKV, D, generator=gen).to(DEVICE)
        outs = {}
        for name, backend in backends.items():
            backend.prepare_metadata(batch)
            outs[name] = backend.forward(q, k, v, layer_id=1, batch=batch)
        torch.testing.assert_close(outs["triton"], outs["torch"], rtol=1e-5, atol=1e-5)
        assert torch.equal(pool.k_cache(1), torch_pool.k_cache(1))  # the same K/V stored
        assert torch.equal(pool.v_cache(1), torch_pool.v_cache(1))


def test_engine_greedy_tokens_equal_torch_backend(tmp_path):
    """Greedy generation with both backends: a first round, then prompts that hit its prefixes
    in the radix cache, with prefills chunked into 32-token pieces."""
    save_random_hf_model(tmp_path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         head_dim=16)
    gen = torch.Generator().manual_seed(1)
    shared = torch.randint(0, 320, (40,), generator=gen).tolist()
    first = [shared + torch.randint(0, 320, (n,), generator=gen).tolist() for n in (5, 30)]
    first.append(torch.randint(0, 320, (3,), generator=gen).tolist())
    second = [shared + torch.randint(0, 320, (n,), generator=gen).tolist() for n in (1, 12)]
    params = SamplingParams(max_tokens=6, ignore_eos=True)
    results = {}
    for backend in ("torch", "triton"):
        sched = make_scheduler(tmp_path, attention_backend=backend, cache_type="radix",
                               max_prefill_length=32, device=DEVICE)
        assert isinstance(sched.engine.attn_backend,
                          TritonBackend if backend == "triton" else TorchNativeBackend)
        rounds = []
        for prompts in (first, second):
            uids = [sched.add_request(p, params) for p in prompts]
            tokens, finished = run_all(sched)
            rounds.append([(tokens[u], finished[u].cached_tokens) for u in uids])
        sched.shutdown()
        results[backend] = rounds
    assert all(cached >= 40 for _, cached in results["triton"][1])  # the prefix path ran
    assert results["triton"] == results["torch"]
