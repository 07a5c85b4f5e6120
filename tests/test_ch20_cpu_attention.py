"""Chapter 20, for the CPU: the C++ attention kernel over the paged pool, and the backend that
uses it for decode and prefill batches. References: a per-request fp32 softmax(q k^T) v in torch, and the torch backend."""

from __future__ import annotations

import shutil

import pytest
import torch

from minisgl.attention import BACKENDS, TorchNativeBackend, auto_backend
from minisgl.attention.cpu import PREFILL_MAX_KEYS, CpuBackend
from minisgl.attention.torch_native import TorchAttnMetadata
from minisgl.core import Batch, Req, SamplingParams
from minisgl.kernel import cpu_attention
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache
from minisgl.llm import LLM

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None or not cpu_attention.available(),
                               reason="needs g++ to build the kernel")
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def random_pool(gen: torch.Generator, lens: list[int], kv_heads: int, head_dim: int,
                dtype: torch.dtype, extra_rows: int = 3):
    """A pool with shuffled slots, a page table whose rows are used in a shuffled order."""
    slots = sum(lens) + 17
    k = torch.randn(slots, kv_heads, head_dim, generator=gen).to(dtype)
    v = torch.randn(slots, kv_heads, head_dim, generator=gen).to(dtype)
    table = torch.full((len(lens) + extra_rows, max(lens) + 5), -7, dtype=torch.int32)
    order = torch.randperm(slots, generator=gen)
    rows = torch.randperm(len(lens) + extra_rows, generator=gen)[: len(lens)]
    start = 0
    for row, n in zip(rows.tolist(), lens):
        table[row, :n] = order[start:start + n].int()
        start += n
    return k, v, table, rows.long(), torch.tensor(lens, dtype=torch.int64)


def reference(q, k, v, table, rows, lens, scale):
    out = []
    groups = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        slots = table[rows[b], : lens[b]].long()
        kk = k[slots].float().repeat_interleave(groups, 1).transpose(0, 1)  # [H, L, D]
        vv = v[slots].float().repeat_interleave(groups, 1).transpose(0, 1)
        p = torch.softmax((q[b].float()[:, None] @ kk.transpose(1, 2)) * scale, -1)
        out.append((p @ vv)[:, 0])
    return torch.stack(out)


@needs_cxx
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (4, 4, 128), (6, 2, 40)])
def test_kernel_matches_a_softmax_over_each_requests_rows(dtype, heads, kv_heads, head_dim):
    gen = torch.Generator().manual_seed(heads * 1000 + head_dim)
    lens = [1, 2, 17, 300, 5, 64]  # one token only, page edges, a long one
    k, v, table, rows, kv_lens = random_pool(gen, lens, kv_heads, head_dim, dtype)
    q = torch.randn(len(lens), heads, head_dim, generator=gen).to(dtype)
    scale = head_dim ** -0.5
    got = cpu_attention.decode_attention(q, k, v, table, rows, kv_lens, scale)
    want = reference(q, k, v, table, rows, kv_lens, scale)
    assert got.dtype == dtype and got.shape == q.shape
    tol = 1e-5 if dtype == torch.float32 else 1e-2  # bf16: the output's own rounding
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=tol)
    # one token attends to itself only: the output is exactly that value row
    slot = table[rows[0], 0].long()
    torch.testing.assert_close(got[0].float(), v[slot].float().repeat_interleave(heads // kv_heads,
                                                                                   0))


@needs_cxx
def test_large_scores_do_not_overflow_the_softmax():
    gen = torch.Generator().manual_seed(3)
    k, v, table, rows, lens = random_pool(gen, [40, 9], 2, 64, torch.float32)
    q = torch.randn(2, 4, 64, generator=gen) * 300  # scores in the thousands
    got = cpu_attention.decode_attention(q, k * 5, v, table, rows, lens, 0.125)
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, reference(q, k * 5, v, table, rows, lens, 0.125),
                               atol=1e-4, rtol=1e-4)


@needs_cxx
def test_hostile_inputs_are_refused_before_any_read():
    gen = torch.Generator().manual_seed(4)
    k, v, table, rows, lens = random_pool(gen, [5, 8], 2, 64, torch.float32)
    q = torch.randn(2, 4, 64, generator=gen)

    def call(**over):
        args = dict(q=q, k_cache=k, v_cache=v, page_table=table, table_rows=rows, kv_lens=lens)
        args |= over
        return cpu_attention.decode_attention(scale=0.125, **args)

    bad = [
        dict(q=q.bfloat16()),  # dtypes differ
        dict(q=q.half(), k_cache=k.half(), v_cache=v.half()),  # no fp16 kernel
        dict(kv_lens=torch.tensor([5, 0])),  # an empty sequence
        dict(kv_lens=torch.tensor([5, table.shape[1] + 1])),  # longer than the table's rows
        dict(table_rows=torch.tensor([0, table.shape[0]])),  # a row past the table
        dict(table_rows=torch.tensor([-1, 0])),
        dict(kv_lens=lens.int()),  # int32 lengths
        dict(kv_lens=torch.tensor([5])),  # one length for two requests
        dict(page_table=table.long()),
        dict(q=torch.randn(2, 3, 64)),  # 3 query heads cannot share 2 KV heads
        dict(k_cache=k.transpose(0, 1).contiguous().transpose(0, 1)),  # rows not contiguous
        dict(q=q[:, :, :32].contiguous()),  # head sizes differ
    ]
    for over in bad:
        with pytest.raises(ValueError):
            call(**over)
    # a slot outside the pool is caught in C++ while reading, even with the checks skipped
    poisoned = table.clone()
    poisoned[rows[1], 3] = k.shape[0]
    for check in (True, False):
        with pytest.raises(ValueError, match="outside the pool"):
            call(page_table=poisoned, check=check)
    poisoned[rows[1], 3] = -1
    with pytest.raises(ValueError, match="outside the pool"):
        call(page_table=poisoned)


@needs_cxx
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_prefill_through_the_kernel_equals_the_torch_backend(dtype, monkeypatch):
    """One layer call of a prefill batch (a prefix hit, a whole new prompt, one new token after
    a long prefix, a prompt across page edges) and of a decode batch, on one shuffled pool and
    page table: the cpu backend (every new token a row of the kernel) against the torch backend
    (SDPA per request). Both store the same K/V; outputs agree to the dtype's rounding."""
    heads, kv_heads, head_dim, pages, page_size = 6, 2, 64, 48, 16
    gen = torch.Generator().manual_seed(11 if dtype == torch.float32 else 12)
    slots = pages * page_size
    pools = [MHAKVCache(KVPoolConfig(num_layers=2, num_kv_heads=kv_heads, head_dim=head_dim,
                                     num_pages=pages, page_size=page_size, dtype=dtype,
                                     device=torch.device("cpu"))) for _ in range(2)]
    old_k = torch.randn(slots, kv_heads, head_dim, generator=gen).to(dtype)
    old_v = torch.randn(slots, kv_heads, head_dim, generator=gen).to(dtype)
    for pool in pools:  # cached prefixes: the same random K/V in both pools
        pool.store_kv(old_k, old_v, torch.arange(slots), layer_id=1)
    table = torch.randperm(slots, generator=gen).int().view(4, slots // 4)
    backends = {"cpu": CpuBackend(pools[0], table, heads, kv_heads),
                "torch": TorchNativeBackend(pools[1], table, heads, kv_heads)}
    # the kernel's prefill, whatever the rule below would pick on this CPU for this dtype
    monkeypatch.setattr(CpuBackend, "kernel_prefills", lambda self, batch: True)
    # (row, cached, new)
    for phase, lens in (("prefill", [(2, 13, 9), (0, 0, 40), (3, 150, 1), (1, 5, 33)]),
                        ("decode", [(1, 39, 1), (3, 4, 1), (0, 17, 1), (2, 191, 1)])):
        reqs = [Req(uid=i, input_ids=[0] * (c + n), sampling_params=SamplingParams(),
                    table_idx=row, cached_len=c, extend_len=n)
                for i, (row, c, n) in enumerate(lens)]
        batch = Batch(reqs, phase)
        batch.out_loc = torch.cat([table[r.table_idx, r.cached_len:r.seq_len].long()
                                   for r in reqs])
        tokens = len(batch.out_loc)
        q = torch.randn(tokens, heads, head_dim, generator=gen).to(dtype)
        k = torch.randn(tokens, kv_heads, head_dim, generator=gen).to(dtype)
        v = torch.randn(tokens, kv_heads, head_dim, generator=gen).to(dtype)
        outs = {}
        for name, backend in backends.items():
            backend.prepare_metadata(batch)
            outs[name] = backend.forward(q, k, v, layer_id=1, batch=batch)
        tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(outs["cpu"].float(), outs["torch"].float(), **tol)
        assert torch.equal(pools[0].k_cache(1), pools[1].k_cache(1))
        assert torch.equal(pools[0].v_cache(1), pools[1].v_cache(1))


@needs_cxx
def test_a_prefill_goes_to_the_kernel_only_in_bf16_with_vdpbf16ps_and_short_sequences():
    """Each query reads its whole prefix again: the kernel pays for short bf16 prefills only
    (attention/cpu.py's measurements); everything else prefills through SDPA."""
    backends = {dtype: CpuBackend(MHAKVCache(KVPoolConfig(
        num_layers=1, num_kv_heads=1, head_dim=64, num_pages=8, page_size=1, dtype=dtype,
        device=torch.device("cpu"))), torch.zeros(2, 4096, dtype=torch.int32), 2, 1)
        for dtype in (torch.float32, torch.bfloat16)}

    def prefill(*lens):
        return Batch([Req(uid=i, input_ids=[0] * n, sampling_params=SamplingParams(),
                          table_idx=i, extend_len=n) for i, n in enumerate(lens)], "prefill")

    short, long = prefill(3, PREFILL_MAX_KEYS), prefill(5, PREFILL_MAX_KEYS + 1)
    assert backends[torch.bfloat16].kernel_prefills(short) == cpu_attention.has_dpbf16()
    assert not backends[torch.bfloat16].kernel_prefills(long)
    assert not backends[torch.float32].kernel_prefills(short)
    backends[torch.bfloat16].prepare_metadata(long)
    assert isinstance(long.attn_metadata, TorchAttnMetadata)


@needs_cxx
def test_engine_decodes_the_same_tokens_as_the_torch_backend():
    """fp32, greedy: the cpu backend's tokens equal the torch backend's on mixed lengths (the
    torch backend is checked against HF transformers in chapter 6 and 11)."""
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 49152, (n,), generator=gen).tolist() for n in (3, 40, 17, 90)]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in (12, 5, 20, 9)]
    tokens = {}
    for attn in ("torch", "cpu"):
        llm = LLM(MODEL, dtype="float32", attention_backend=attn, page_size=16)
        assert type(llm.scheduler.engine.attn_backend) is BACKENDS[attn]
        tokens[attn] = [r["token_ids"] for r in llm.generate(prompts, params, use_tqdm=False)]
    assert tokens["cpu"] == tokens["torch"]


@needs_cxx
def test_auto_picks_the_kernel_on_a_cpu_and_the_flag_turns_it_off(monkeypatch):
    table = torch.zeros(2, 4, dtype=torch.int32)
    assert auto_backend(table) == "cpu" and CpuBackend.available()
    monkeypatch.setenv("MINISGL_DISABLE_FUSED_KERNELS", "1")  # load_env reads it on each call
    assert not cpu_attention.available() and auto_backend(table) == "torch"


def test_a_failed_build_leaves_the_torch_backend_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-minisgl")
    warnings = []
    monkeypatch.setattr(cpu_attention.logger, "warning", warnings.append)
    assert cpu_attention.load_library(tmp_path) is None
    assert len(warnings) == 1 and "torch backend" in warnings[0]
    assert not list(tmp_path.glob("*.so"))
