"""Linear layers with 8-bit weights (chapter 26): the int8 weight-only products, and the per-token
fp8 quantization of activations that torch._scaled_mm needs.

int8, one token (a batch-1 decode step): chapter 20's GEMV (gemv.py) with one more switch,
SCALED. It already converts each weight tile to fp32 as it loads it, so an int8 weight costs
nothing more there: the tile is half as many bytes, and since every weight of row n shares the
scale s[n], the row's sum is multiplied by s[n] once, after the loop. The prologues come along
unchanged (RMSNorm with the residual add, SiLU-and-mul), so a quantized decoder layer launches
as few kernels as a plain one.

int8, several tokens: a tiled matrix multiply. Each program owns a [BLOCK_M, BLOCK_N] tile of
the output and walks along K: it loads a [BLOCK_N, BLOCK_K] tile of int8 values, converts it to
the activations' dtype (exact: every int8 value is a bf16/fp16 number) and multiplies it on the
tensor cores with tl.dot, summing in fp32; the scales and the bias come at the end. Programs
are ordered in groups of GROUP_M row tiles, so that a tile of the weight is read from memory once
and then from L2 by the other programs of the group.

fp8 activations: one program per token finds the row's largest |x|, then writes x / sx rounded
to e4m3 and sx = max|x| / 448 (the scale torch._scaled_mm multiplies back). Triton's interpreter
rounds some values to the wrong e4m3 number (when rounding carries into the exponent), so this
kernel is checked on a GPU only; the int8 kernels are checked on a CPU too.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .gemv import _launch, gemv_config

# (kernels read module constants only when they are tl.constexpr)
FP8_MAX = tl.constexpr(448.0)
MIN_SCALE = tl.constexpr(1e-12)


def _check_int8(name: str, x: torch.Tensor, x_width: int, weight: torch.Tensor,
                scale: torch.Tensor, bias: torch.Tensor | None, rows: int | None = 1) -> None:
    """x [rows, x_width * K] in a float dtype, weight [N, K] int8, scale [N] fp32, bias [N]."""
    n, k = weight.shape if weight.dim() == 2 else (-1, -1)
    if weight.dtype != torch.int8 or weight.dim() != 2 or weight.stride(1) != 1:
        raise ValueError(f"{name} takes an int8 weight [N, K] with a contiguous last axis; got "
                         f"{weight.dtype} {tuple(weight.shape)}")
    if x.dim() != 2 or x.shape[1] != x_width * k or (rows is not None and x.shape[0] != rows) \
            or x.stride(1) != 1 or not x.is_floating_point():
        raise ValueError(f"{name} takes x [{rows or 'M'}, {x_width}K] with K = {k}; got "
                         f"{x.dtype} {tuple(x.shape)}")
    if scale.shape != (n,) or scale.dtype != torch.float32 or scale.stride(0) != 1:
        raise ValueError(f"{name}: scale must be a contiguous fp32 [{n}], got {scale.dtype} "
                         f"{tuple(scale.shape)}")
    if bias is not None and (bias.shape != (n,) or bias.dtype != x.dtype or bias.stride(0) != 1):
        raise ValueError(f"{name}: bias must be a contiguous [{n}] of x's dtype {x.dtype}")


def gemv_int8_config(n: int, k: int, prologue: str = "none") -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps) for an int8 weight [n, k]. A GEMV for one token waits on
    memory: its time is set by how many round trips to HBM each program makes, not by how many
    bytes come back. With bf16's tiles an int8 weight comes in half as many bytes per trip, the
    same number of trips, and hardly any faster. So each tile spans twice as many columns:
    every thread loads as many bytes as it does for bf16, in half the trips."""
    block_n, block_k, warps = gemv_config(n, k, prologue)
    return block_n, min(2 * block_k, max(triton.next_power_of_2(k), 16)), warps


def gemv_int8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
              bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [1, K] times the int8 weight [N, K] with row scales [N] -> [1, N] in x's dtype."""
    _check_int8("gemv_int8", x, 1, weight, scale, bias)
    return _launch(x, weight, bias, config=gemv_int8_config(*weight.shape), scale_ptr=scale,
                   SCALED=True)


def gemv_int8_rmsnorm(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                      bias: torch.Tensor | None, norm_weight: torch.Tensor, eps: float,
                      residual: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """gemv_rmsnorm (gemv.py) with an int8 weight: (gemv_int8(rms_norm(s)), s), s = x + residual."""
    _check_int8("gemv_int8_rmsnorm", x, 1, weight, scale, bias)
    k = weight.shape[1]
    if norm_weight.shape != (k,) or norm_weight.dtype != x.dtype or norm_weight.stride(0) != 1:
        raise ValueError(f"norm_weight must be a contiguous ({k},) tensor of x's dtype")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype
                                 or residual.stride(1) != 1):
        raise ValueError("residual must match x (shape, dtype, contiguous last axis)")
    total = x if residual is None else torch.empty(1, k, dtype=x.dtype, device=x.device)
    out = _launch(x, weight, bias, "norm", gemv_int8_config(*weight.shape, "norm"),
                  r_ptr=x if residual is None else residual,
                  norm_w_ptr=norm_weight, r_out_ptr=total, eps=eps, NORM=True,
                  RESIDUAL=residual is not None, ROW_BLOCK=min(triton.next_power_of_2(k), 8192),
                  scale_ptr=scale, SCALED=True)
    return out, total


def gemv_int8_silu_and_mul(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                           bias: torch.Tensor | None = None) -> torch.Tensor:
    """gemv_int8(silu_and_mul(x)) in one kernel; x [1, 2K] (gate then up)."""
    _check_int8("gemv_int8_silu_and_mul", x, 2, weight, scale, bias)
    return _launch(x, weight, bias, "gated", gemv_int8_config(*weight.shape, "gated"),
                   GATED=True, scale_ptr=scale, SCALED=True)


@triton.jit
def _gemm_int8_kernel(x_ptr, w_ptr, s_ptr, b_ptr, out_ptr, M, N, K, stride_x, stride_w,
                      stride_out, HAS_BIAS: tl.constexpr, IS_FP32: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    # Groups of GROUP_M row tiles go through the column tiles together (the weight's tiles are
    # shared by the group while they sit in L2).
    per_group = GROUP_M * grid_n
    first_m = (pid // per_group) * GROUP_M
    group_m = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_m
    pid_n = (pid % per_group) // group_m
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < M
    col_ok = cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + ks[None, :],
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        q = tl.load(w_ptr + cols[:, None].to(tl.int64) * stride_w + ks[None, :],
                    mask=col_ok[:, None] & k_ok[None, :], other=0)
        b = tl.trans(q.to(a.dtype))  # [BLOCK_K, BLOCK_N]; int8 -> bf16/fp16 is exact
        if IS_FP32:  # tl.dot would round fp32 inputs to tf32 unless told otherwise
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    acc *= tl.load(s_ptr + cols, mask=col_ok, other=0.0)[None, :]
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    tl.store(out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def gemm_config(m: int) -> tuple[int, int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages) by the number of tokens: few tokens
    read the weight once in narrow row tiles; many share each weight tile across 128 rows.
    (Chosen, not swept on a GPU yet: benchmarks/quant_gemv.py times the one-token kernels.)"""
    if m <= 16:
        return 16, 64, 128, 4, 4
    if m <= 64:
        return 64, 64, 64, 4, 4
    return 128, 128, 64, 8, 3


def gemm_int8(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
              bias: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K] times the int8 weight [N, K] with row scales [N] -> [M, N] in x's dtype."""
    _check_int8("gemm_int8", x, 1, weight, scale, bias, rows=None)
    m, n, k = x.shape[0], weight.shape[0], weight.shape[1]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    block_m, block_n, block_k, warps, stages = gemm_config(m)
    grid = (triton.cdiv(m, block_m) * triton.cdiv(n, block_n),)
    _gemm_int8_kernel[grid](x, weight, scale, bias if bias is not None else scale, out, m, n, k,
                            x.stride(0), weight.stride(0), out.stride(0),
                            HAS_BIAS=bias is not None, IS_FP32=x.dtype == torch.float32,
                            BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=8,
                            num_warps=warps, num_stages=stages)
    return out


@triton.jit
def _quantize_fp8_kernel(x_ptr, q_ptr, s_ptr, K, stride_x, stride_q, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    amax = tl.zeros((BLOCK,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        ks = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + ks, mask=ks < K, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    sx = tl.maximum(tl.max(amax, axis=0) / FP8_MAX, MIN_SCALE)
    for k0 in range(0, K, BLOCK):
        ks = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + ks, mask=ks < K, other=0.0).to(tl.float32)
        # div_rn: IEEE-rounded division, as torch's. Triton's `/` is the fast approximate one,
        # which moved 0.11% of the values to the neighbouring e4m3 number on an H100.
        q = tl.minimum(tl.maximum(tl.math.div_rn(x, sx), -FP8_MAX), FP8_MAX)
        tl.store(q_ptr + row * stride_q + ks, q.to(q_ptr.dtype.element_ty), mask=ks < K)
    tl.store(s_ptr + row, sx)


def quantize_fp8_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] -> (xq [M, K] e4m3, sx [M, 1] fp32): ops/quant_linear.py's
    quantize_fp8_rows_torch in one kernel (two passes over each row: its max, then the values)."""
    if x.dim() != 2 or x.stride(1) != 1:
        raise ValueError(f"quantize_fp8_rows takes x [M, K] with a contiguous last axis, got "
                         f"{tuple(x.shape)}")
    m, k = x.shape
    xq = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    sx = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    if m:
        _quantize_fp8_kernel[(m,)](x, xq, sx, k, x.stride(0), xq.stride(0),
                                   BLOCK=min(triton.next_power_of_2(k), 4096))
    return xq, sx
