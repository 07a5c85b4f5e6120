"""Chapter 20: the fused small kernels of a decoder layer (RMSNorm, add + RMSNorm, q/k norm + RoPE,
SiLU-and-mul) against the ops' torch references, which are what a CPU runs; the one-token GEMV,
alone and with an RMSNorm or SiLU-and-mul computed on its input, against the torch composition;
the registry's rule that takes them for GPU tensors, and a decoder on that one-token path against
the torch code; and the decode attention kernel's tiling configs (one split writing its result
directly, other key-block sizes) against dense attention.

On a CPU the kernels run under Triton's interpreter, in fp32 (within 1e-5) and fp16 (the rounding
order of the torch code, so equal within one fp16 step); the interpreter keeps bf16 as raw 16-bit
integers, so bf16 is checked only on a GPU. Inputs are random, outputs start as NaN where the
kernel writes into a given tensor, and strided inputs come from slices of wider tensors.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from test_ch20_triton_attention import check_decode, paged_kv

import minisgl.layers.linear as linear_module
from minisgl import ops
from minisgl.distributed import set_tp_info
from minisgl.kernel.triton import (
    DECODE_CONFIGS,
    DecodeConfig,
    choose_num_splits,
    decode_attention,
    fused_add_rms_norm,
    gemv,
    gemv_rmsnorm,
    gemv_silu_and_mul,
    max_num_splits,
    qk_norm_rope,
    rms_norm,
    silu_and_mul,
)
from minisgl.layers import LinearRowParallel
from minisgl.layers.rotary import RotaryEmbedding
from minisgl.models.config import RopeScaling
from minisgl.ops import triton_impls
from minisgl.ops.activation import silu_and_mul_torch as torch_silu_and_mul
from minisgl.ops.norm import rms_norm_torch as torch_rms_norm

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def randn(*shape: int, gen: torch.Generator, dtype=torch.float32, scale: float = 1.0):
    return (torch.randn(*shape, generator=gen) * scale).to(dtype)


def close(got: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype,
          atol: float | None = None) -> None:
    """fp32 within 1e-5; half precision within one rounding step of the output."""
    tol = {torch.float32: 1e-5, torch.float16: 1e-3, torch.bfloat16: 1.6e-2}[dtype]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got.float().cpu(), expected.float().cpu(), rtol=tol,
                               atol=tol if atol is None else atol)


# ---------------------------------------------------------------------------------------------
# RMSNorm


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("tokens,hidden", [(1, 64), (7, 96), (3, 1024)])
def test_rms_norm_equals_torch(tokens, hidden, dtype):
    gen = torch.Generator().manual_seed(tokens * 1000 + hidden)
    x = randn(tokens, hidden, gen=gen, dtype=dtype, scale=3.0)
    w = randn(hidden, gen=gen, dtype=dtype)
    close(rms_norm(x.to(DEVICE), w.to(DEVICE), 1e-6), torch_rms_norm(x, w, 1e-6), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_add_rms_norm_equals_torch(dtype):
    gen = torch.Generator().manual_seed(1)
    x, r = randn(6, 96, gen=gen, dtype=dtype), randn(6, 96, gen=gen, dtype=dtype)
    w = randn(96, gen=gen, dtype=dtype)
    x_before, r_before = x.clone(), r.clone()
    xd, rd = x.to(DEVICE), r.to(DEVICE)
    out, total = fused_add_rms_norm(xd, rd, w.to(DEVICE), 1e-5)
    close(total, x + r, dtype)
    close(out, torch_rms_norm(x + r, w, 1e-5), dtype)
    # the inputs are never written, and both results are new tensors
    assert torch.equal(xd.cpu(), x_before) and torch.equal(rd.cpu(), r_before)
    assert total.data_ptr() not in (xd.data_ptr(), rd.data_ptr())


def test_fused_add_rms_norm_first_layer_has_no_residual():
    """residual None (the first layer): x itself is the residual, returned as it is."""
    gen = torch.Generator().manual_seed(2)
    x, w = randn(4, 64, gen=gen).to(DEVICE), randn(64, gen=gen).to(DEVICE)
    out, total = fused_add_rms_norm(x, None, w, 1e-6)
    assert total is x
    close(out, torch_rms_norm(x.cpu(), w.cpu(), 1e-6), torch.float32)


def test_rms_norm_strided_rows_and_3d_inputs():
    """Rows of a wider tensor (a strided 2-D view) are read in place; a 3-D [tokens, heads, dim]
    input works over its last axis."""
    gen = torch.Generator().manual_seed(3)
    wide = randn(5, 200, gen=gen).to(DEVICE)
    x, r = wide[:, 10:74], wide[:, 100:164]  # row stride 200
    w = randn(64, gen=gen).to(DEVICE)
    out, total = fused_add_rms_norm(x, r, w, 1e-6)
    expected_total = x.cpu() + r.cpu()
    close(total, expected_total, torch.float32)
    close(out, torch_rms_norm(expected_total, w.cpu(), 1e-6), torch.float32)
    heads = wide[:, :192].reshape(5, 3, 64)
    close(rms_norm(heads, w, 1e-6), torch_rms_norm(heads.cpu(), w.cpu(), 1e-6), torch.float32)


def test_rms_norm_rejects_mismatched_inputs():
    x = torch.randn(3, 64, device=DEVICE)
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, torch.randn(32, device=DEVICE), 1e-6)
    with pytest.raises(ValueError, match="residual"):
        fused_add_rms_norm(x, torch.randn(3, 32, device=DEVICE), torch.randn(64, device=DEVICE),
                           1e-6)
    with pytest.raises(ValueError, match="residual"):
        fused_add_rms_norm(x, x.half(), torch.randn(64, device=DEVICE), 1e-6)
    empty = rms_norm(torch.randn(0, 64, device=DEVICE), torch.randn(64, device=DEVICE), 1e-6)
    assert empty.shape == (0, 64)


# ---------------------------------------------------------------------------------------------
# q/k norm + RoPE


def torch_qk_norm_rope(qkv, positions, rotary, hq, hkv, d, q_w, k_w, eps):
    """What AttentionLayer does on a CPU: split, per-head RMSNorm (Qwen3), RoPE."""
    q, k, _ = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q, k = q.reshape(-1, hq, d), k.reshape(-1, hkv, d)
    if q_w is not None:
        q, k = torch_rms_norm(q, q_w, eps), torch_rms_norm(k, k_w, eps)
    return rotary.forward(positions, q, k)


# (q heads, kv heads, head_dim, qk norm, RoPE scaling)
QK_CASES = [
    (4, 2, 64, True, RopeScaling()),
    (16, 8, 128, True, RopeScaling()),  # Qwen3-0.6B's heads
    (3, 1, 64, False, RopeScaling()),  # Llama/Qwen2: RoPE only
    (2, 2, 128, False, RopeScaling(kind="llama3", factor=8.0, low_freq_factor=1.0,
                                   high_freq_factor=4.0, original_max_position=64)),
    (4, 1, 64, True, RopeScaling(kind="yarn", factor=4.0, original_max_position=64)),
]


def dev(t):
    """t on the kernels' device (None stays None: an optional argument)."""
    return None if t is None else t.to(DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("case", range(len(QK_CASES)))
def test_qk_norm_rope_equals_torch(case, dtype):
    hq, hkv, d, qk_norm, scaling = QK_CASES[case]
    gen = torch.Generator().manual_seed(case)
    max_pos = 300
    rotary = RotaryEmbedding(d, max_pos, 10000.0, scaling)
    tokens = 6
    width = (hq + 2 * hkv) * d
    # rows of a wider buffer: the kernel must follow the row stride
    wide = randn(tokens, width + 40, gen=gen, dtype=dtype, scale=2.0)
    qkv = wide[:, 8:8 + width]
    positions = torch.tensor([299, 0, 17, 5, 17, 150])  # out of order, repeated, both ends
    q_w = randn(d, gen=gen, dtype=dtype) if qk_norm else None
    k_w = randn(d, gen=gen, dtype=dtype) if qk_norm else None
    expected_q, expected_k = torch_qk_norm_rope(qkv, positions, rotary, hq, hkv, d, q_w, k_w,
                                                1e-6)

    cos, sin = rotary._cos.to(DEVICE), rotary._sin.to(DEVICE)
    qkv_dev = wide.to(DEVICE)[:, 8:8 + width]
    before = qkv_dev.clone()
    q, k = qk_norm_rope(qkv_dev, positions.to(DEVICE), cos, sin, hq, hkv, d, dev(q_w),
                        dev(k_w), 1e-6)
    close(q, expected_q, dtype)
    close(k, expected_k, dtype)
    assert torch.equal(qkv_dev, before)  # qkv (and so v, a view of it) is not written


def test_qk_norm_rope_int32_positions_and_one_token():
    gen = torch.Generator().manual_seed(9)
    rotary = RotaryEmbedding(64, 50, 1e6)
    qkv = randn(1, 8 * 64, gen=gen)
    q_w, k_w = randn(64, gen=gen), randn(64, gen=gen)
    expected = torch_qk_norm_rope(qkv, torch.tensor([49]), rotary, 4, 2, 64, q_w, k_w, 1e-6)
    got = qk_norm_rope(qkv.to(DEVICE), torch.tensor([49], dtype=torch.int32, device=DEVICE),
                       rotary._cos.to(DEVICE), rotary._sin.to(DEVICE), 4, 2, 64,
                       q_w.to(DEVICE), k_w.to(DEVICE), 1e-6)
    for g, e in zip(got, expected):
        close(g, e, torch.float32)


def test_qk_norm_rope_rejects_bad_inputs():
    rotary = RotaryEmbedding(64, 50, 1e4)
    cos, sin = rotary._cos.to(DEVICE), rotary._sin.to(DEVICE)
    qkv = torch.randn(2, 8 * 64, device=DEVICE)
    pos = torch.tensor([0, 1], device=DEVICE)
    w = torch.randn(64, device=DEVICE)
    with pytest.raises(ValueError, match="qkv has shape"):
        qk_norm_rope(qkv, pos, cos, sin, 4, 3, 64)  # heads do not add up
    with pytest.raises(ValueError, match="positions"):
        qk_norm_rope(qkv, pos[:1], cos, sin, 4, 2, 64)
    with pytest.raises(ValueError, match="both"):
        qk_norm_rope(qkv, pos, cos, sin, 4, 2, 64, q_weight=w)
    with pytest.raises(ValueError, match="norm weights"):
        qk_norm_rope(qkv, pos, cos, sin, 4, 2, 64, w[:32], w[:32])
    with pytest.raises(ValueError, match="cos"):
        qk_norm_rope(qkv, pos, cos[:, :32], sin, 4, 2, 64)
    with pytest.raises(ValueError, match="contiguous"):
        qk_norm_rope(torch.randn(8 * 64, 2, device=DEVICE).t(), pos, cos, sin, 4, 2, 64)


# ---------------------------------------------------------------------------------------------
# SiLU-and-mul


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(1, 2 * 40), (5, 2 * 1500), (2, 3, 2 * 24)])
def test_silu_and_mul_equals_torch(shape, dtype):
    gen = torch.Generator().manual_seed(shape[-1])
    x = randn(*shape, gen=gen, dtype=dtype, scale=4.0)  # far into both tails of silu
    close(silu_and_mul(x.to(DEVICE)), torch_silu_and_mul(x), dtype)


def test_silu_and_mul_strided_rows_and_odd_width():
    gen = torch.Generator().manual_seed(4)
    wide = randn(3, 100, gen=gen).to(DEVICE)
    close(silu_and_mul(wide[:, 10:90]), torch_silu_and_mul(wide[:, 10:90].cpu()), torch.float32)
    with pytest.raises(ValueError, match="even"):
        silu_and_mul(torch.randn(2, 7, device=DEVICE))


# ---------------------------------------------------------------------------------------------
# Decode attention: tiling configs and the one-split path


def test_one_split_writes_directly_and_padding_rows_get_zeros():
    """num_splits 1: stage 1 writes the final output (no merge); a length-0 row (CUDA-graph
    padding) must come out as zeros, not as whatever the output held."""
    gen = torch.Generator().manual_seed(21)
    kv = paged_kv([300, 77, 1, 5], 16, 2, 16, torch.float32, gen)
    q = torch.randn(4, 4, 16, generator=gen).to(DEVICE)
    kv.kv_lens[2] = 0
    out = torch.full_like(q, float("nan"))
    decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                     num_splits=1, out=out)
    assert out[2].eq(0).all()
    keep = [0, 1, 3]
    kv.table_idx, kv.kv_lens = kv.table_idx[keep], kv.kv_lens[keep]
    check_decode(out[keep], q[keep], kv, 0.25, 1e-5)


@pytest.mark.parametrize("block_n", [16, 32, 128])
def test_decode_other_block_sizes(block_n):
    gen = torch.Generator().manual_seed(block_n)
    kv = paged_kv([300, 1, 129, 64], 16, 2, 16, torch.float32, gen)
    q = torch.randn(4, 8, 16, generator=gen).to(DEVICE)
    config = DecodeConfig(block_n=block_n, num_warps=2, num_stages=3)
    for splits in (1, 3):
        out = torch.full_like(q, float("nan"))
        decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                         num_splits=splits, out=out, config=config)
        check_decode(out, q, kv, 0.25, 1e-5)


def test_decode_config_table_covers_every_batch_size():
    bounds = [max_batch for max_batch, _ in DECODE_CONFIGS]
    assert bounds == sorted(bounds) and bounds[-1] >= 1 << 20
    device = torch.device(DEVICE)
    most = max_num_splits(8, 8192, device)
    for bs in (1, 2, 3, 4, 16, 64, 256, 1024):
        assert 1 <= choose_num_splits(bs, 8, 8192, device) <= most
    if DEVICE == "cpu":
        assert most == 1  # the interpreter runs programs one by one: never split


# ---------------------------------------------------------------------------------------------
# One-token GEMV (the linear layers of a batch-1 decode step)


# short rows, K 2048 and K >= 3072: the three tilings of gemv_config; ragged last tiles
@pytest.mark.parametrize("n,k,bias", [(1, 7, False), (37, 300, True), (9, 2048, False),
                                      (64, 1030, True), (5, 3100, True)])
def test_gemv_equals_torch(n, k, bias):
    gen = torch.Generator().manual_seed(n * 1000 + k)
    w, x = randn(n, k, gen=gen), randn(1, k, gen=gen)
    b = randn(n, gen=gen) if bias else None
    got = gemv(x.to(DEVICE), w.to(DEVICE), None if b is None else b.to(DEVICE))
    close(got, torch.nn.functional.linear(x, w, b), torch.float32, atol=1e-4)


def test_gemv_never_reads_past_the_weight():
    """A weight that is a slice of a larger buffer: rows and columns beyond it are poison."""
    gen = torch.Generator().manual_seed(5)
    big = torch.full((20, 50), float("nan"), device=DEVICE)
    w = big[:13, :40]
    w.copy_(randn(13, 40, gen=gen))
    x = randn(1, 40, gen=gen)
    close(gemv(x.to(DEVICE), w), torch.nn.functional.linear(x, w.cpu()), torch.float32)


def test_gemv_rejects_what_it_cannot_compute():
    w, x = torch.randn(8, 16, device=DEVICE), torch.randn(1, 16, device=DEVICE)
    with pytest.raises(ValueError):
        gemv(torch.randn(2, 16, device=DEVICE), w)  # two tokens
    with pytest.raises(ValueError):
        gemv(torch.randn(1, 15, device=DEVICE), w)  # K does not match
    with pytest.raises(ValueError):
        gemv(x, w.t().contiguous().t())  # weight's last axis is strided
    with pytest.raises(ValueError):
        gemv(x, w, torch.randn(7, device=DEVICE))  # bias of the wrong size
    with pytest.raises(ValueError):
        gemv(x.half(), w)  # dtypes differ


# ---------------------------------------------------------------------------------------------
# The GEMV with the small op before it computed on its input (gemv_rmsnorm, gemv_silu_and_mul)


def torch_norm_linear(x, w, b, norm_w, eps, residual=None):
    """What the layers do on a CPU: the add and RMSNorm (RMSNormFused), then the product with the
    GEMV's arithmetic (fp32 products and sums, rounded once)."""
    total = x if residual is None else x + residual
    normed = torch_rms_norm(total, norm_w, eps)
    out = F.linear(normed.float(), w.float(), None if b is None else b.float())
    return out.to(x.dtype), total


def torch_gated_linear(x2, w, b):
    out = F.linear(torch_silu_and_mul(x2).float(), w.float(), None if b is None else b.float())
    return out.to(x2.dtype)


@pytest.fixture
def poisoned_outputs(monkeypatch):
    """Every new float tensor starts as NaN: an output element the kernel forgets stays NaN."""
    empty = torch.empty

    def nan_empty(*args, **kwargs):
        t = empty(*args, **kwargs)
        return t.fill_(float("nan")) if t.is_floating_point() else t

    monkeypatch.setattr(torch, "empty", nan_empty)


# (n, k, bias, residual): short and long rows (the tilings of gemv_config), a ragged last tile,
# and a row longer than the mean-square pass takes at once (8192: it loops)
NORM_CASES = [(37, 300, True, True), (9, 2048, False, True), (16, 96, False, False),
              (5, 1030, True, False), (3, 8192 + 40, False, True)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n,k,bias,residual", NORM_CASES)
def test_gemv_rmsnorm_equals_norm_then_linear(n, k, bias, residual, dtype, poisoned_outputs):
    gen = torch.Generator().manual_seed(n * 1000 + k)
    x, r = randn(1, k, gen=gen, dtype=dtype, scale=3.0), randn(1, k, gen=gen, dtype=dtype)
    w = randn(n, k, gen=gen, dtype=dtype, scale=k ** -0.5)
    b = randn(n, gen=gen, dtype=dtype) if bias else None
    norm_w = randn(k, gen=gen, dtype=dtype)
    r = r if residual else None
    expected, expected_total = torch_norm_linear(x, w, b, norm_w, 1e-6, r)

    xd, rd = dev(x), dev(r)
    out, total = gemv_rmsnorm(xd, dev(w), dev(b), dev(norm_w), 1e-6, rd)
    close(out, expected, dtype)
    assert torch.equal(xd.cpu(), x) and (r is None or torch.equal(rd.cpu(), r))  # not written
    if residual:
        assert torch.equal(total.cpu(), expected_total)  # x + residual, rounded as torch rounds
        assert total.data_ptr() not in (xd.data_ptr(), rd.data_ptr())
    else:
        assert total is xd  # the first layer: x itself is the residual, as in RMSNormFused


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("n,k,bias", [(1, 7, False), (37, 300, True), (24, 2048, True),
                                      (3, 3080, False)])
def test_gemv_silu_and_mul_equals_activation_then_linear(n, k, bias, dtype, poisoned_outputs):
    gen = torch.Generator().manual_seed(n * 1000 + k + 1)
    x2 = randn(1, 2 * k, gen=gen, dtype=dtype, scale=4.0)  # far into both tails of silu
    w = randn(n, k, gen=gen, dtype=dtype, scale=k ** -0.5)
    b = randn(n, gen=gen, dtype=dtype) if bias else None
    got = gemv_silu_and_mul(x2.to(DEVICE), w.to(DEVICE), None if b is None else b.to(DEVICE))
    close(got, torch_gated_linear(x2, w, b), dtype)


def test_prologues_round_where_the_small_kernels_round():
    """With an identity weight the GEMV's output is its input, exactly: in fp16 it must equal
    what RMSNorm (with the residual add) and the SiLU-and-mul kernel write, bit for bit. (Against
    the small Triton kernel, not torch: on the GPU both Triton kernels use the GPU's fast exp,
    whose fp16 result can differ from torch's by one unit in the last place.)"""
    gen = torch.Generator().manual_seed(11)
    k, half = 96, torch.float16
    eye = torch.eye(k, dtype=half, device=DEVICE)
    x, r = randn(1, k, gen=gen, dtype=half, scale=3.0), randn(1, k, gen=gen, dtype=half)
    norm_w = randn(k, gen=gen, dtype=half)
    out, _ = gemv_rmsnorm(x.to(DEVICE), eye, None, norm_w.to(DEVICE), 1e-6, r.to(DEVICE))
    assert torch.equal(out.cpu(), torch_rms_norm(x + r, norm_w, 1e-6))
    x2 = randn(1, 2 * k, gen=gen, dtype=half, scale=4.0)
    assert torch.equal(gemv_silu_and_mul(x2.to(DEVICE), eye), silu_and_mul(x2.to(DEVICE)))


def test_fused_gemvs_never_read_past_their_inputs():
    """Every input is a view into a NaN-filled buffer: weight rows and columns beyond the view,
    the row around x / gate_up, and the ends of residual and norm weight are poison."""
    gen = torch.Generator().manual_seed(12)
    n, k = 13, 40
    big = torch.full((20, 2 * k + 20), float("nan"), device=DEVICE)
    w = big[3:3 + n, 5:5 + k]  # row stride 2k + 20, offset into the buffer
    w.copy_(randn(n, k, gen=gen))
    row = torch.full((1, 4 * k), float("nan"), device=DEVICE)
    x, r = row[:, 10:10 + k], row[:, 2 * k:3 * k]
    x.copy_(randn(1, k, gen=gen))
    r.copy_(randn(1, k, gen=gen))
    norm_buf = torch.full((k + 8,), float("nan"), device=DEVICE)
    norm_w = norm_buf[4:4 + k]
    norm_w.copy_(randn(k, gen=gen))
    cpu = [t.cpu() for t in (x, w, norm_w, r)]
    out, total = gemv_rmsnorm(x, w, None, norm_w, 1e-6, r)
    expected, expected_total = torch_norm_linear(cpu[0], cpu[1], None, cpu[2], 1e-6, cpu[3])
    close(out, expected, torch.float32)
    close(total, expected_total, torch.float32)
    x2 = row[:, 7:7 + 2 * k]
    x2.copy_(randn(1, 2 * k, gen=gen))
    close(gemv_silu_and_mul(x2, w), torch_gated_linear(x2.cpu(), w.cpu(), None), torch.float32)


def test_fused_gemvs_reject_what_they_cannot_compute():
    w, nw = torch.randn(8, 16, device=DEVICE), torch.randn(16, device=DEVICE)
    x = torch.randn(1, 16, device=DEVICE)
    bad_norm = [
        dict(x=torch.randn(2, 16, device=DEVICE)),  # two tokens
        dict(x=torch.randn(1, 15, device=DEVICE)),  # K does not match
        dict(w=w.t().contiguous().t()),  # weight's last axis is strided
        dict(bias=torch.randn(7, device=DEVICE)),  # bias of the wrong size
        dict(norm_w=torch.randn(15, device=DEVICE)),  # norm weight of the wrong size
        dict(norm_w=nw.half()),  # norm weight in another dtype
        dict(norm_w=torch.randn(16, 2, device=DEVICE)[:, 0]),  # strided norm weight
        dict(residual=torch.randn(1, 15, device=DEVICE)),  # residual of the wrong size
        dict(residual=x.half()),  # residual in another dtype
    ]
    for case in bad_norm:
        args = dict(x=x, w=w, bias=None, norm_w=nw, residual=None) | case
        with pytest.raises(ValueError):
            gemv_rmsnorm(args["x"], args["w"], args["bias"], args["norm_w"], 1e-6,
                         args["residual"])
    with pytest.raises(ValueError, match=r"\[1, 2K\]"):
        gemv_silu_and_mul(x, w)  # gate and up need 2K values
    with pytest.raises(ValueError):
        gemv_silu_and_mul(torch.randn(2, 32, device=DEVICE), w)  # two tokens
    with pytest.raises(ValueError):
        gemv_silu_and_mul(torch.randn(1, 32, device=DEVICE).half(), w)  # dtypes differ


def test_row_parallel_gated_gemv_reduces_then_adds_the_bias_once(monkeypatch):
    """down_proj at TP=2 on one rank: the gated GEMV's partial sum is all-reduced (faked here as
    the other rank holding the same partial sum) and the bias is added once, after the sum: the
    same as forward(silu_and_mul(gate_up))."""
    reduced = []

    def fake_all_reduce(t):
        reduced.append(t.shape)
        return 2 * t

    monkeypatch.setattr(linear_module, "all_reduce", fake_all_reduce)
    gen = torch.Generator().manual_seed(13)
    set_tp_info(0, 2)
    try:
        down = LinearRowParallel(2 * 24, 16, bias=True)  # this rank: 24 of the 48 inputs
    finally:
        set_tp_info(0, 1)
    w, b = randn(16, 24, gen=gen), randn(16, gen=gen)
    gate_up = randn(1, 2 * 24, gen=gen, scale=3.0)
    down.weight, down.bias = w, b
    expected = down.forward(torch_silu_and_mul(gate_up))  # the torch path (CPU)
    down.weight, down.bias = w.to(DEVICE), b.to(DEVICE)
    calls = one_token_path(monkeypatch)
    got = down.forward_silu_and_mul(gate_up.to(DEVICE))
    assert calls == {"silu_and_mul_linear": 1}  # the gated GEMV ran
    assert reduced == [(1, 16), (1, 16)]  # one all-reduce each
    close(got, expected, torch.float32)


# ---------------------------------------------------------------------------------------------
# The registry's rule (ops/triton_impls.py), and a decoder on the one-token path


class OnGpu:
    """Stands in for a GPU tensor where only the rule looks at it (it is never computed on)."""

    is_cuda = True

    def __init__(self, *shape: int, contiguous: bool = True) -> None:
        self.shape, self.contiguous = shape, contiguous

    def dim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        return self.contiguous


@pytest.fixture
def fused_kernels_flag(monkeypatch):
    """Set MINISGL_DISABLE_FUSED_KERNELS for the rule (it reads the flag once per process)."""

    def set_flag(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("MINISGL_DISABLE_FUSED_KERNELS", raising=False)
        else:
            monkeypatch.setenv("MINISGL_DISABLE_FUSED_KERNELS", value)
        triton_impls.fused_kernels_on.cache_clear()

    yield set_flag
    monkeypatch.delenv("MINISGL_DISABLE_FUSED_KERNELS", raising=False)
    triton_impls.fused_kernels_on.cache_clear()


def test_a_gpu_tensor_takes_triton_unless_fused_kernels_are_disabled(fused_kernels_flag):
    small = (ops.rms_norm, ops.fused_add_rms_norm, ops.silu_and_mul, ops.rope, ops.sample)
    gemvs = (ops.linear, ops.fused_add_rms_norm_linear, ops.silu_and_mul_linear)
    fused_kernels_flag(None)
    for op in small:
        assert op.kind_for(OnGpu(5, 64)) == "triton", op.name
        # a CPU tensor: the torch code, or the C++ ops of kernel/cpu_ops.py where they build
        assert op.kind_for(torch.zeros(5, 64)) in ("torch", "cpp"), op.name
    for op in gemvs:  # the GEMVs take one contiguous token only
        assert op.kind_for(OnGpu(1, 64)) == "triton", op.name
        assert op.kind_for(OnGpu(2, 64)) == "torch", op.name
        assert op.kind_for(OnGpu(1, 64, contiguous=False)) == "torch", op.name
        assert op.kind_for(torch.zeros(1, 64)) == "torch", op.name
    fused_kernels_flag("1")
    for op in small + gemvs:
        assert op.kind_for(OnGpu(1, 64)) == "torch", op.name


def one_contiguous_token(x: torch.Tensor, *_) -> bool:
    return x.dim() == 2 and x.shape[0] == 1 and x.is_contiguous()


def one_token_path(monkeypatch) -> Counter:
    """Let the one-token ops take their GEMV for one contiguous token on any device (on a CPU the
    kernels are interpreted), so one token takes the GPU's path; returns how often each op ran
    its GEMV."""
    calls: Counter = Counter()
    for op in (ops.linear, ops.fused_add_rms_norm_linear, ops.silu_and_mul_linear):
        (gemv,) = [impl for impl in op.faster if impl.kind == "triton"]  # not oneDNN's (CPU)

        def counted(*args, _name=op.name, _fn=gemv.fn):
            calls[_name] += 1
            return _fn(*args)

        monkeypatch.setattr(op, "faster", [replace(gemv, fn=counted, takes=one_contiguous_token)])
    return calls


@pytest.mark.parametrize("case", ["qwen2-bias", "qwen3-qknorm", "qwen3-moe-and-mlp"])
def test_one_token_decoder_path_equals_torch(case, tmp_path, monkeypatch):
    """Logits of one token through the fused decoder layers (norms inside the qkv and gate_up
    GEMVs, SiLU-and-mul inside down_proj's) against the torch code, fp32, within 1e-5. The MoE
    model mixes dense layers (fused) with MoE layers (their post-attention norm stays apart).
    On a GPU the fused side runs there (compiled Triton cannot read CPU tensors), with the other
    kernels of chapter 20 too, so within 1e-4 as the models against HF below."""
    from test_ch03_models import CASES, save_random_hf_model

    from minisgl.models.weight import load_model
    from minisgl.moe.tiny import write_tiny_qwen3_moe

    if case == "qwen3-moe-and-mlp":
        write_tiny_qwen3_moe(tmp_path, seed=3, mlp_only_layers=[1])  # layer 1 is dense
        moe_layers = 2
    else:
        model_type, arch, overrides = CASES[case]
        save_random_hf_model(tmp_path, model_type, arch, **overrides)
        moe_layers = 0
    reference = load_model(tmp_path)  # the torch code, as on any CPU
    model = reference if DEVICE == "cpu" else load_model(tmp_path, device=DEVICE)
    layers = len(model.model.layers)
    dense = layers - moe_layers
    ids, positions = torch.tensor([17]), torch.tensor([29])
    expected = reference.forward(ids, positions)
    two_ids, two_positions = torch.tensor([17, 3]), torch.tensor([29, 30])
    expected_two = reference.forward(two_ids, two_positions)
    calls = one_token_path(monkeypatch)
    got = model.forward(ids.to(DEVICE), positions.to(DEVICE)).cpu()
    # the norm with qkv everywhere, with gate_up in dense layers; SiLU-and-mul with down_proj
    assert calls["fused_add_rmsnorm_linear"] == layers + dense
    assert calls["silu_and_mul_linear"] == dense
    tol = 1e-5 if DEVICE == "cpu" else 1e-4
    assert (got - expected).abs().max().item() <= tol
    calls.clear()
    got_two = model.forward(two_ids.to(DEVICE), two_positions.to(DEVICE)).cpu()
    assert not calls  # two tokens: the unfused layers
    if DEVICE == "cpu":  # the plain ops (here F.linear; the C++ linear computed expected_two)
        torch.testing.assert_close(got_two, expected_two, rtol=0, atol=1e-5)
    else:
        assert (got_two - expected_two).abs().max().item() <= tol


# ---------------------------------------------------------------------------------------------
# On a GPU: bf16 against the torch code (run on the CPU), and whole models in fp32 against HF


@pytest.mark.gpu
def test_bfloat16_kernels_on_gpu():
    gen = torch.Generator().manual_seed(30)
    bf16 = torch.bfloat16
    x, r = randn(9, 1024, gen=gen, dtype=bf16), randn(9, 1024, gen=gen, dtype=bf16)
    w = randn(1024, gen=gen, dtype=bf16)
    out, total = fused_add_rms_norm(x.cuda(), r.cuda(), w.cuda(), 1e-6)
    assert torch.equal(total.cpu(), x + r)
    close(out, torch_rms_norm(x + r, w, 1e-6), bf16)
    g = randn(9, 2 * 3072, gen=gen, dtype=bf16, scale=3.0)
    close(silu_and_mul(g.cuda()), torch_silu_and_mul(g), bf16)
    rotary = RotaryEmbedding(128, 4096, 1e6)
    qkv = randn(9, 32 * 128, gen=gen, dtype=bf16, scale=2.0)
    positions = torch.randperm(4096, generator=gen)[:9]
    q_w, k_w = randn(128, gen=gen, dtype=bf16), randn(128, gen=gen, dtype=bf16)
    expected = torch_qk_norm_rope(qkv, positions, rotary, 16, 8, 128, q_w, k_w, 1e-6)
    got = qk_norm_rope(qkv.cuda(), positions.cuda(), rotary._cos.cuda(), rotary._sin.cuda(), 16,
                       8, 128, q_w.cuda(), k_w.cuda(), 1e-6)
    # RoPE's x1 * cos - x2 * sin can cancel: torch rounds both products to bf16 first, the
    # kernel rounds once, so near zero they differ by up to a bf16 step of the products (|x| < 8)
    for g_, e in zip(got, expected):
        close(g_, e, bf16, atol=2 ** -4)
    # the one-token GEMV of each Qwen3-0.6B shape; fp32 sums in another order than cuBLAS's
    for n, k in [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)]:
        w, x = randn(n, k, gen=gen, dtype=bf16, scale=k ** -0.5), randn(1, k, gen=gen, dtype=bf16)
        close(gemv(x.cuda(), w.cuda()), torch.nn.functional.linear(x.float(), w.float()).to(bf16),
              bf16)
    # the GEMVs with their input computed: input norm -> qkv_proj (first layer without residual,
    # and with one), post-attention norm -> gate_up_proj, SiLU-and-mul -> down_proj
    for n, residual in [(4096, False), (4096, True), (6144, True)]:
        x, r = randn(1, 1024, gen=gen, dtype=bf16, scale=3.0), randn(1, 1024, gen=gen, dtype=bf16)
        w = randn(n, 1024, gen=gen, dtype=bf16, scale=1024 ** -0.5)
        norm_w = randn(1024, gen=gen, dtype=bf16)
        r = r if residual else None
        expected, expected_total = torch_norm_linear(x, w, None, norm_w, 1e-6, r)
        xd = x.cuda()
        out, total = gemv_rmsnorm(xd, w.cuda(), None, norm_w.cuda(), 1e-6,
                                  None if r is None else r.cuda())
        close(out, expected, bf16)
        assert torch.equal(total.cpu(), expected_total) and (residual or total is xd)
    x2 = randn(1, 2 * 3072, gen=gen, dtype=bf16, scale=3.0)
    w, b = randn(1024, 3072, gen=gen, dtype=bf16, scale=3072 ** -0.5), randn(1024, gen=gen,
                                                                             dtype=bf16)
    close(gemv_silu_and_mul(x2.cuda(), w.cuda(), b.cuda()), torch_gated_linear(x2, w, b), bf16)
    # rounding where the small kernels round: with an identity weight the output is the input
    eye = torch.eye(1024, dtype=bf16, device="cuda")
    x, r = randn(1, 1024, gen=gen, dtype=bf16, scale=3.0), randn(1, 1024, gen=gen, dtype=bf16)
    norm_w = randn(1024, gen=gen, dtype=bf16)
    out, _ = gemv_rmsnorm(x.cuda(), eye, None, norm_w.cuda(), 1e-6, r.cuda())
    normed, _ = fused_add_rms_norm(x.cuda(), r.cuda(), norm_w.cuda(), 1e-6)
    # the mean square sums in another order than rms_norm's: a rare element may round the other
    # way, so all but a handful must be equal
    assert (out != normed).sum().item() <= 4
    x2 = randn(1, 2 * 1024, gen=gen, dtype=bf16, scale=4.0)
    assert torch.equal(gemv_silu_and_mul(x2.cuda(), eye), silu_and_mul(x2.cuda()))


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["llama-untied", "qwen2-bias", "qwen3-qknorm"])
def test_models_on_gpu_with_fused_kernels_match_hf(case, tmp_path, monkeypatch):
    """The whole model on a GPU (fused kernels in every layer) against HF on the CPU, fp32: 23
    tokens, then one token alone (a batch-1 decode step's shape: the norms run inside the qkv and
    gate_up GEMVs, SiLU-and-mul inside down_proj's)."""
    from test_ch03_models import CASES, TINY, save_random_hf_model

    from minisgl.models.weight import load_model

    model_type, arch, overrides = CASES[case]
    hf_model = save_random_hf_model(tmp_path, model_type, arch, **overrides)
    ours = load_model(tmp_path, device="cuda")
    ids = torch.randint(0, TINY["vocab_size"], (23,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = hf_model(ids[None]).logits[0].float()
    got = ours.forward(ids.cuda(), torch.arange(len(ids), device="cuda")).cpu()
    assert (got - expected).abs().max().item() <= 1e-4
    calls = one_token_path(monkeypatch)  # counts the one-token ops that ran their GEMV
    for token in ids[:3]:
        one = token.reshape(1)
        with torch.no_grad():
            expected = hf_model(one[None]).logits[0].float()
        got = ours.forward(one.cuda(), torch.zeros(1, dtype=torch.long, device="cuda")).cpu()
        assert (got - expected).abs().max().item() <= 1e-4
    layers = TINY["num_hidden_layers"]
    assert calls["fused_add_rmsnorm_linear"] == 3 * 2 * layers
    assert calls["silu_and_mul_linear"] == 3 * layers
