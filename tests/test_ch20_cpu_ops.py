"""Chapter 20, for the CPU: the C++ linear, add+RMSNorm, SiLU-and-mul and RoPE of
kernel/cpu_ops.py, against the torch references of ops/ on fresh random inputs, and what C++
must never be handed (each refused in Python with a clear error)."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from minisgl import ops
from minisgl.kernel import cpu_ops
from minisgl.layers.cpu_pack import sub_ops
from minisgl.ops.activation import silu_and_mul_torch
from minisgl.ops.norm import fused_add_rms_norm_torch
from minisgl.ops.rope import rope_torch

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or not cpu_ops.available(),
                                reason="needs g++ to build csrc/cpu_ops.cpp")
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.bfloat16: dict(rtol=1.6e-2, atol=2e-2)}


def fresh(gen: torch.Generator, *shape: int, dtype=torch.float32, scale: float = 1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n,k", [(1, 37, 100), (2, 64, 96), (3, 5, 8), (4, 9, 7),
                                      (7, 130, 576), (40, 12, 33), (0, 8, 16), (100, 13, 40)])
def test_linear_matches_f_linear(dtype, rows, n, k):
    """Tiles of 3 rows x 4 outputs with every remainder: rows 1-4 and 7, outputs not a multiple
    of 4, K not a multiple of 8 (the scalar tail), no rows at all, and 100 rows: two chunks of 48
    and a rest."""
    gen = torch.Generator().manual_seed(rows * 1000 + n * 10 + k)
    x, w, b = fresh(gen, rows, k, dtype=dtype), fresh(gen, n, k, dtype=dtype), \
        fresh(gen, n, dtype=dtype)
    for bias in (None, b):
        want = F.linear(x.float(), w.float(), None if bias is None else bias.float())
        got = cpu_ops.linear(x, w, bias)
        assert got.dtype == dtype and got.shape == (rows, n)
        torch.testing.assert_close(got.float(), want.to(dtype).float(), **TOL[dtype])


def test_linear_reads_rows_of_a_wider_tensor_and_is_what_ops_linear_runs():
    gen = torch.Generator().manual_seed(3)
    wide = fresh(gen, 6, 40)
    x = wide[:, 8:32]  # rows 40 apart, not contiguous as a whole
    w = fresh(gen, 11, 24)
    assert ops.linear.kind_for(x, w, None) == "cpp"
    torch.testing.assert_close(ops.linear(x, w, None), F.linear(x, w), rtol=1e-5, atol=1e-5)
    assert ops.linear.kind_for(x.to(torch.float16), w.half(), None) == "torch"  # not taken


def test_linear_refuses_what_cpp_cannot_read():
    gen = torch.Generator().manual_seed(4)
    x, w = fresh(gen, 3, 16), fresh(gen, 8, 16)
    with pytest.raises(ValueError, match="weight"):
        cpu_ops.linear(x, w.t().contiguous().t())  # a transposed (column-major) weight
    with pytest.raises(ValueError, match="weight"):
        cpu_ops.linear(x, fresh(gen, 8, 15))  # K differs
    with pytest.raises(ValueError, match="weight"):
        cpu_ops.linear(x, w.bfloat16())  # dtypes differ
    with pytest.raises(ValueError, match="bias"):
        cpu_ops.linear(x, w, fresh(gen, 7))
    with pytest.raises(ValueError, match="contiguous rows"):
        cpu_ops.linear(fresh(gen, 16, 3).t(), w)  # columns contiguous, rows not
    with pytest.raises(ValueError, match="fp32 or bf16"):
        cpu_ops.linear(x.half(), w.half())
    with pytest.raises(ValueError, match="matrix"):
        cpu_ops.linear(fresh(gen, 2, 3, 16), w)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,dim", [(1, 576), (5, 100), (3, 7)])
def test_add_rmsnorm_matches_the_reference(dtype, rows, dim):
    gen = torch.Generator().manual_seed(rows + dim)
    x, residual = fresh(gen, rows, dim, dtype=dtype, scale=3), fresh(gen, rows, dim, dtype=dtype)
    weight = fresh(gen, dim, dtype=dtype)
    for res in (residual, None):
        want, want_res = fused_add_rms_norm_torch(x, res, weight, 1e-6)
        got, got_res = cpu_ops.fused_add_rms_norm(x, res, weight, 1e-6)
        torch.testing.assert_close(got, want, **TOL[dtype])
        torch.testing.assert_close(got_res, want_res, rtol=0, atol=0)  # one rounded add
    assert cpu_ops.fused_add_rms_norm(x, None, weight, 1e-6)[1] is x  # x is the residual
    assert ops.fused_add_rms_norm.kind_for(x, residual, weight, 1e-6) == "cpp"


def test_add_rmsnorm_refuses_mismatched_inputs():
    gen = torch.Generator().manual_seed(5)
    x = fresh(gen, 2, 8)
    with pytest.raises(ValueError, match="residual"):
        cpu_ops.fused_add_rms_norm(x, fresh(gen, 3, 8), fresh(gen, 8), 1e-6)
    with pytest.raises(ValueError, match="weight"):
        cpu_ops.fused_add_rms_norm(x, None, fresh(gen, 9), 1e-6)
    with pytest.raises(ValueError, match="weight"):
        cpu_ops.fused_add_rms_norm(x, None, fresh(gen, 8, dtype=torch.bfloat16), 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,inter", [(1, 1536), (4, 3), (33, 1000)])
def test_silu_and_mul_matches_the_reference(dtype, rows, inter):
    gen = torch.Generator().manual_seed(rows * inter)
    x = fresh(gen, rows, 2 * inter, dtype=dtype, scale=4)  # large |gate|: exp over/underflows
    torch.testing.assert_close(cpu_ops.silu_and_mul(x), silu_and_mul_torch(x), **TOL[dtype])
    with pytest.raises(ValueError, match="even"):
        cpu_ops.silu_and_mul(fresh(gen, 2, 5, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("tokens,heads,kv_heads,dim", [(1, 9, 3, 64), (6, 4, 4, 16), (3, 6, 2, 10)])
def test_rope_matches_the_reference(dtype, qk_norm, tokens, heads, kv_heads, dim):
    """Llama (rotation only) and Qwen3 (per-head RMSNorm first), GQA, v columns after q|k."""
    gen = torch.Generator().manual_seed(tokens * 100 + dim + qk_norm)
    qkv = fresh(gen, tokens, (heads + 2 * kv_heads) * dim, dtype=dtype, scale=2)
    angles = fresh(gen, 50, dim // 2).repeat(1, 2) * 3
    cos, sin = angles.cos().contiguous(), angles.sin().contiguous()
    positions = torch.randint(0, 50, (tokens,), generator=gen)
    norms = (fresh(gen, dim, dtype=dtype), fresh(gen, dim, dtype=dtype)) if qk_norm \
        else (None, None)
    args = (qkv, positions, cos, sin, heads, kv_heads, dim, *norms, 1e-6)
    assert ops.rope.kind_for(*args) == "cpp"
    for got, want in zip(cpu_ops.rope(*args), rope_torch(*args), strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, **TOL[dtype])
    got = cpu_ops.rope(qkv, positions.int(), *args[2:])  # int32 positions work too
    torch.testing.assert_close(got[0], rope_torch(*args)[0], **TOL[dtype])


def test_rope_refuses_positions_outside_the_tables_and_bad_shapes():
    gen = torch.Generator().manual_seed(6)
    qkv = fresh(gen, 2, 4 * 8)
    cos = sin = fresh(gen, 10, 8)
    for bad in (10, -1, 2**40):
        with pytest.raises(IndexError, match="outside the rotary tables"):
            cpu_ops.rope(qkv, torch.tensor([0, bad]), cos, sin, 2, 1, 8, None, None, 0.0)
    with pytest.raises(ValueError, match="narrower"):
        cpu_ops.rope(qkv, torch.tensor([0, 1]), cos, sin, 4, 1, 8, None, None, 0.0)
    with pytest.raises(ValueError, match="odd"):
        cpu_ops.rope(fresh(gen, 2, 28), torch.tensor([0, 1]), fresh(gen, 10, 7),
                     fresh(gen, 10, 7), 2, 1, 7, None, None, 0.0)
    with pytest.raises(ValueError, match="together"):
        cpu_ops.rope(qkv, torch.tensor([0, 1]), cos, sin, 2, 1, 8, fresh(gen, 8), None, 1e-6)
    with pytest.raises(ValueError, match="one position per token"):
        cpu_ops.rope(qkv, torch.tensor([0]), cos, sin, 2, 1, 8, None, None, 0.0)
    with pytest.raises(ValueError, match="fp32"):
        cpu_ops.rope(qkv, torch.tensor([0, 1]), cos.double(), sin, 2, 1, 8, None, None, 0.0)


def test_a_failed_build_leaves_the_torch_ops_with_one_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-minisgl")
    warnings = []
    monkeypatch.setattr(cpu_ops.logger, "warning", warnings.append)
    assert cpu_ops.load_library(tmp_path) is None
    assert len(warnings) == 1 and "torch code runs" in warnings[0]
    assert not list(tmp_path.glob("*.so"))


def test_fp32_weights_stay_plain_for_the_cpp_linear_without_panels(smollm2_dir, monkeypatch):
    """Without panels (an AVX2 CPU: simulated here by having none) the engine packs no fp32 layer
    weight for oneDNN where the C++ linear builds: every projection runs the C++ kernel, and the
    model's logits are the unpacked torch model's. Only the LM head gets its packed copy (for the
    op-by-op path; engine/cpu_step.py reads the plain one)."""
    from minisgl.layers.cpu_pack import pack_linears
    from minisgl.layers.linear import _Linear
    from minisgl.models.weight import load_model

    monkeypatch.setattr(cpu_ops, "panel_dtypes", lambda: ())
    model = load_model(smollm2_dir)
    assert pack_linears(model) == 1 and model.lm_head._packed_weight.is_mkldnn
    projections = [op for op in sub_ops(model) if isinstance(op, _Linear)]
    assert projections and not any(op.weight.is_mkldnn for op in projections)
    ids = torch.randint(0, model.config.vocab_size, (5,),
                        generator=torch.Generator().manual_seed(2))
    hidden = model.model.forward(ids, torch.arange(5))
    assert ops.linear.kind_for(hidden, projections[0].weight, None) == "cpp"
    torch.testing.assert_close(cpu_ops.linear(hidden, model.lm_head.logits_weight()),
                               F.linear(hidden, model.lm_head.logits_weight()),
                               rtol=1e-5, atol=1e-4)


def needs_panels(dtype: torch.dtype) -> None:
    if dtype not in cpu_ops.panel_dtypes():
        pytest.skip(f"no {dtype} panels here: they need a CPU with AVX-512 (and AVX-512 BF16 for "
                    "bf16)")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,n,k", [(1, 16, 2), (3, 48, 578), (8, 64, 576), (5, 80, 100),
                                      (17, 960, 576), (9, 576, 1536), (0, 32, 64),
                                      (130, 208, 96)])
def test_panel_linear_matches_f_linear(dtype, rows, n, k):
    """pack_panels' panels (vdpbf16ps for bf16, AVX-512 FMA for fp32): row tails 1-5 after
    tiles of 6, tiles of 1-4 panels (16 to 64 outputs), K not a multiple of 16 or 32, the course's
    shapes, no rows, and a prefill-sized input. A bf16 output is rounded once from fp32 sums, as
    F.linear in fp32 then rounded is: they may differ in the last bit of bf16 only."""
    needs_panels(dtype)
    gen = torch.Generator().manual_seed(rows * 7 + n + k)
    x, w, b = (fresh(gen, rows, k, dtype=dtype), fresh(gen, n, k, dtype=dtype),
               fresh(gen, n, dtype=dtype))
    packed = cpu_ops.pack_panels(w)
    step = 2 if dtype == torch.bfloat16 else 1
    assert packed.shape == (n // 16, k // step, 16, step) and cpu_ops.is_panels(packed)
    p = 1 % packed.shape[0]
    assert torch.equal(packed[p, 0, 3], w[16 * p + 3, :step])
    tol = dict(rtol=8e-3, atol=1e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-4)
    for bias in (None, b):
        want = F.linear(x.float(), w.float(), None if bias is None else bias.float())
        got = cpu_ops.linear(x, packed, bias)
        assert got.dtype == dtype and got.shape == (rows, n)
        torch.testing.assert_close(got.float(), want.to(dtype).float(), **tol)
        assert ops.linear.kind_for(x, packed, bias) == "cpp"


@pytest.mark.parametrize("dtype", DTYPES)
def test_panel_linear_reads_rows_of_a_wider_tensor_and_refuses_what_it_cannot_take(dtype):
    needs_panels(dtype)
    gen = torch.Generator().manual_seed(21)
    w = fresh(gen, 32, 40, dtype=dtype)
    packed = cpu_ops.pack_panels(w)
    wide = fresh(gen, 6, 72, dtype=dtype)
    x = wide[:, 16:56]  # rows 72 apart
    torch.testing.assert_close(cpu_ops.linear(x, packed).float(),
                               F.linear(x.float(), w.float()).to(dtype).float(),
                               rtol=8e-3, atol=1e-2)
    # a transposed weight is an [out, in] matrix like any other: packed from a contiguous copy
    wt = fresh(gen, 24, 32, dtype=dtype).t()
    torch.testing.assert_close(cpu_ops.linear(x[:, :24], cpu_ops.pack_panels(wt)).float(),
                               F.linear(x[:, :24].float(), wt.float()).to(dtype).float(),
                               rtol=8e-3, atol=1e-2)
    bad_weights = [fresh(gen, 30, 40, dtype=dtype),  # outputs not a multiple of 16
                   fresh(gen, 32, 40, dtype=torch.float16),  # no panels for fp16
                   fresh(gen, 32, dtype=dtype),  # 1-D
                   fresh(gen, 0, 40, dtype=dtype),  # nothing to pack
                   fresh(gen, 2, 16, 40, dtype=dtype)]  # 3-D
    if dtype == torch.bfloat16:
        bad_weights.append(fresh(gen, 32, 39, dtype=dtype))  # an odd K: no whole pairs
    for bad in bad_weights:
        assert not cpu_ops.can_pack_panels(bad)
        with pytest.raises(ValueError, match="pack_panels takes"):
            cpu_ops.pack_panels(bad)
    with pytest.raises(ValueError, match="40 columns"):
        cpu_ops.linear(fresh(gen, 3, 42, dtype=dtype), packed)
    other = torch.float32 if dtype == torch.bfloat16 else torch.bfloat16
    with pytest.raises(ValueError, match="input"):
        cpu_ops.linear(fresh(gen, 3, 40, dtype=other), packed)
    with pytest.raises(ValueError, match="bias"):
        cpu_ops.linear(fresh(gen, 3, 40, dtype=dtype), packed, fresh(gen, 31, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_weights_are_packed_into_panels_and_the_model_still_computes_its_logits(
        dtype, smollm2_dir):
    """Where the library has panels for the dtype, every projection and the LM head's copy go to
    them (none to oneDNN), and the packed model's hidden states and logits are the plain
    model's (fp32: to 1e-4; bf16: to its rounding)."""
    needs_panels(dtype)
    from minisgl.layers.cpu_pack import pack_linears
    from minisgl.layers.linear import _Linear
    from minisgl.models.weight import load_model

    plain = load_model(smollm2_dir, dtype=dtype)
    model = load_model(smollm2_dir, dtype=dtype)
    projections = [op for op in sub_ops(model) if isinstance(op, _Linear)]
    assert pack_linears(model) == len(projections) + 1
    assert all(cpu_ops.is_panels(op.weight) for op in projections)
    assert cpu_ops.is_panels(model.lm_head._packed_weight)
    ids = torch.randint(0, model.config.vocab_size, (6,),
                        generator=torch.Generator().manual_seed(5))
    got = model.model.forward(ids, torch.arange(6))
    want = plain.model.forward(ids, torch.arange(6))
    if dtype == torch.float32:
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    else:
        assert (got.float() - want.float()).abs().max() < 0.05 * want.float().abs().max()
    torch.testing.assert_close(model.lm_head.forward(got).float(),
                               plain.lm_head.forward(got).float(),
                               **(dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32
                                  else dict(rtol=2e-2, atol=5e-2)))
