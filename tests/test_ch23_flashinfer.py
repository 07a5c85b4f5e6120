"""Chapter 23: FlashInfer as a peer in the engine and in the trace loop.

Everywhere: `--attn flashinfer` refuses a CPU and names the package it needs; without FlashInfer
no FlashInfer solution is registered; the metadata an attention solution prepares is reused only
for the very same index tensors. With a GPU and FlashInfer installed: every FlashInfer solution
equals the torch reference on fresh random inputs (paged decode and prefill over cached prefixes,
the norms, SiLU-and-mul, inputs left untouched), and the engine on the flashinfer backend (eager
prefill with prefix-cache hits, decode replayed from CUDA graphs while batches grow and shrink)
generates the torch backend's greedy tokens.
"""

from __future__ import annotations

import sys

import pytest
import torch
from test_ch03_models import save_random_hf_model
from test_ch08_scheduler import make_scheduler
from test_ch15_cuda_graph import count_replays, generate_all

from minisgl.attention import create_attn_backend
from minisgl.attention.flashinfer import flashinfer_module
from minisgl.engine.graph import graph_batch_sizes
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache
from minisgl.trace import flashinfer_solutions as fis
from minisgl.trace import solutions
from minisgl.trace.prepared import MetadataCache

needs_flashinfer = pytest.mark.skipif(not fis.installed(), reason="needs flashinfer-python")


def small_pool(device: str, dtype: torch.dtype = torch.bfloat16
               ) -> tuple[MHAKVCache, torch.Tensor]:
    config = KVPoolConfig(num_layers=1, num_kv_heads=2, head_dim=64, num_pages=8, page_size=1,
                          dtype=dtype, device=torch.device(device))
    return MHAKVCache(config), torch.zeros(2, 8, dtype=torch.int32, device=device)


def test_the_backend_refuses_a_cpu_and_names_what_it_needs(monkeypatch) -> None:
    pool, table = small_pool("cpu")
    with pytest.raises(ValueError, match="GPU only"):
        create_attn_backend("flashinfer", pool, table, 4, 2)
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # what a missing package looks like
    with pytest.raises(ImportError, match="pip install flashinfer-python"):
        flashinfer_module()


def test_no_flashinfer_no_solutions(monkeypatch) -> None:
    registered = {i.op for impls in solutions.SOLUTIONS.values() for i in impls
                  if i.suffix == "flashinfer"}
    if fis.installed():
        assert registered == {"attention", "rmsnorm", "fused_add_rmsnorm", "silu_and_mul"}
        assert solutions.ATTENTION_BACKEND["flashinfer"] == "flashinfer"
    else:  # this machine: nothing registered, the loop runs as before
        assert registered == set()
    monkeypatch.setattr(fis, "installed", lambda: False)
    assert fis.flashinfer_ops() == []


def test_attention_metadata_is_reused_only_for_the_same_tensors() -> None:
    cache, made = MetadataCache(), []
    a, b = torch.tensor([0, 3]), torch.tensor([5, 6, 7])

    def make(tag: str):
        return lambda: made.append(tag) or tag

    assert cache.get((a, b), make("first")) == "first"
    assert cache.get((a, b), make("second")) == "first"  # the timing loop: same objects
    assert cache.get((a.clone(), b), make("third")) == "third"  # equal values, new tensor
    assert cache.get((a, b, None), make("fourth")) == "fourth"  # a different key length
    assert made == ["first", "third", "fourth"]


# ---------------------------------------------------------------------------------- GPU
def paged_inputs(gen: torch.Generator, kv_lens: list[int], q_lens: list[int] | None,
                 heads: int = 16, kv_heads: int = 8, dim: int = 128) -> dict:
    """FlashInfer's paged layout with pages of one token, the pages of all requests scattered
    over a pool larger than they need (so a wrong index reads the wrong row)."""
    total = sum(kv_lens)
    pages = total + 37
    rows = sum(q_lens) if q_lens else len(kv_lens)
    where = torch.randperm(pages, generator=gen)[:total].int()
    cache = lambda: torch.randn(pages, 1, kv_heads, dim, generator=gen).bfloat16()  # noqa: E731
    out = {"q": torch.randn(rows, heads, dim, generator=gen).bfloat16(),
           "k_cache": cache(), "v_cache": cache(),
           "kv_indptr": torch.tensor([0, *torch.tensor(kv_lens).cumsum(0).tolist()]).int(),
           "kv_indices": where, "sm_scale": dim ** -0.5}
    if q_lens:
        out["qo_indptr"] = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()]).int()
    return {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in out.items()}


@pytest.mark.gpu
@needs_flashinfer
@pytest.mark.parametrize("kv_lens, q_lens", [
    ([1, 17, 300, 64, 1025], None),  # decode: one query per request
    ([33], None),
    ([40, 7, 300], [40, 3, 129]),  # prefill: no prefix, a prefix of 4, a prefix of 171
    ([500], [1]),
])
def test_flashinfer_attention_equals_torch(kv_lens, q_lens) -> None:
    inputs = paged_inputs(torch.Generator().manual_seed(sum(kv_lens)), kv_lens, q_lens)
    want = solutions.attention_torch(**inputs).float()
    got = fis.attention(**inputs).float()
    assert torch.isfinite(got).all()
    assert (got - want).abs().max().item() < 2e-2


@pytest.mark.gpu
@needs_flashinfer
@pytest.mark.parametrize("rows", [1, 7, 256])
def test_flashinfer_norms_and_activation_equal_torch(rows) -> None:
    from minisgl.ops.activation import silu_and_mul_torch
    from minisgl.ops.norm import fused_add_rms_norm_torch, rms_norm_torch

    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, 1024, generator=gen).bfloat16().cuda()
    residual = torch.randn(rows, 1024, generator=gen).bfloat16().cuda()
    weight = (1 + torch.randn(1024, generator=gen) / 4).bfloat16().cuda()
    heads = torch.randn(rows, 16, 128, generator=gen).bfloat16().cuda()  # Qwen3's q/k norm
    head_weight = (1 + torch.randn(128, generator=gen) / 4).bfloat16().cuda()
    x0, r0 = x.clone(), residual.clone()

    def close(got: torch.Tensor, want: torch.Tensor) -> bool:  # one bf16 rounding apart
        return torch.allclose(got.float(), want.float(), atol=3e-2, rtol=2e-2)

    assert close(fis.rms_norm(x, weight, 1e-6), rms_norm_torch(x, weight, 1e-6))
    assert close(fis.rms_norm(heads, head_weight, 1e-6), rms_norm_torch(heads, head_weight, 1e-6))
    out, summed = fis.fused_add_rms_norm(x, residual, weight, 1e-6)
    want_out, want_summed = fused_add_rms_norm_torch(x, residual, weight, 1e-6)
    assert close(out, want_out) and torch.equal(summed, want_summed)
    first, same = fis.fused_add_rms_norm(x, None, weight, 1e-6)
    assert close(first, rms_norm_torch(x, weight, 1e-6)) and same is x
    assert torch.equal(x, x0) and torch.equal(residual, r0)  # FlashInfer's kernel works in place
    gate_up = torch.randn(rows, 2 * 768, generator=gen).bfloat16().cuda()
    assert close(fis.silu_and_mul(gate_up), silu_and_mul_torch(gate_up))


@pytest.fixture(scope="module")
def qwen3_like(tmp_path_factory):
    """Tiny, with Qwen3-0.6B's attention shape (16 query heads over 8 KV heads of 128): the
    FlashInfer kernels this test compiles are the ones the real model uses."""
    path = tmp_path_factory.mktemp("qwen3")
    save_random_hf_model(path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         num_attention_heads=16, num_key_value_heads=8, head_dim=128,
                         num_hidden_layers=3)
    return path


@pytest.mark.gpu
@needs_flashinfer
def test_engine_on_flashinfer_generates_the_torch_backends_tokens(qwen3_like) -> None:
    gen = torch.Generator().manual_seed(23)
    shared = torch.randint(0, 320, (45,), generator=gen).tolist()  # a prefix the cache keeps
    prompts = [shared + torch.randint(0, 320, (int(n),), generator=gen).tolist()
               for n in torch.randint(1, 30, (21,), generator=gen)]
    lens = torch.randint(2, 14, (len(prompts),), generator=gen).tolist()
    work = list(zip(prompts, lens))
    waves = [work[:5], work[5:]]  # 5 requests, then 16 more join: batches grow past 8, shrink
    results = {}
    for backend in ("torch", "flashinfer"):
        sched = make_scheduler(qwen3_like, attention_backend=backend, device="cuda",
                               dtype=torch.bfloat16,
                               cache_type="radix", page_size=1, num_pages=2048,
                               cuda_graph_max_bs=16)
        replays = count_replays(sched.engine.graph_runner)
        results[backend] = generate_all(sched, waves)
        if backend == "flashinfer":
            assert sorted(sched.engine.graph_runner.graphs) == graph_batch_sizes(16)
            assert replays and max(replays) <= 16
            assert sched.stats().decode_batches > len(replays)  # batches over 16 ran eagerly
        sched.shutdown()
    assert results["flashinfer"] == results["torch"]


@pytest.mark.gpu
@needs_flashinfer
def test_the_backend_refuses_fp32() -> None:
    pool, table = small_pool("cuda", torch.float32)  # FlashInfer has no fp32 kernels
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        create_attn_backend("flashinfer", pool, table, 4, 2)
