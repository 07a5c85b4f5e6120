"""y = x W^T + b for a single token: the weight products of a batch-1 decode step.

With one token a linear layer is a matrix-vector product: every weight is read once and used for
one multiply-add, so the time is the time to read the weight. cuBLAS picks its kernels for
matrices; for Qwen3-0.6B's one-token shapes on the H200 they read the weights at 0.3-2.6 TB/s
(benchmarks/gemv_shapes.py; o_proj's 4 MB took 12.4 us), while this plain kernel reads them at
1.8-3.9 TB/s. Each program owns BLOCK_N output rows and walks along K, multiplying a
[BLOCK_N, BLOCK_K] tile of the weight by the matching slice of x and summing in fp32; enough
programs run at once to keep the memory system busy.

Only one token: with several, a tile of the weight should be reused for every token (tl.dot), which
is what cuBLAS does well, so larger batches stay with it.

Prologues. At batch 1 a decode step is bound by its number of kernels: each costs 1.5-2 us of
launch, ramp-up and tail on the GPU, while the small ops between the GEMVs (an RMSNorm, a
SiLU-and-mul) touch only a few KB. So the GEMV can compute its own input from the small op's
inputs instead of reading the small op's output (constexpr switches; one kernel):

- NORM (gemv_rmsnorm): the input is RMSNorm(x) * norm_weight, or with RESIDUAL
  RMSNorm(x + residual) * norm_weight. Each program first walks the row once for the mean square,
  then normalises each tile of x as it multiplies it. With RESIDUAL, program 0 also writes
  x + residual (the residual stream the next layer adds to) into a separate tensor: never into x
  or residual, which the other programs are still reading.
- GATED (gemv_silu_and_mul): the input is silu(gate) * up of a [1, 2K] row (gate first).

Each rounds to the input dtype exactly where the unfused kernels (rmsnorm.py, activation.py) and
the torch code round, so the GEMV sees the very values the small kernel would have written.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import pdl_args, wait_for_previous_kernel


@triton.jit
def _residual_sum(x_ptr, r_ptr, cols, col_ok, RESIDUAL: tl.constexpr):
    """x[cols], or x + residual rounded to x's dtype (the add of the residual stream)."""
    x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)
    if RESIDUAL:
        r = tl.load(r_ptr + cols, mask=col_ok, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)
    return x


@triton.jit
def _rms_scale(x_ptr, r_ptr, r_out_ptr, K, eps, RESIDUAL: tl.constexpr, ROW_BLOCK: tl.constexpr):
    """1 / sqrt(mean(s^2) + eps) of the row s (x, or x + residual), in fp32. Program 0 also
    writes s to r_out: every program computes the sum, one is enough to store it. ROW_BLOCK is
    the whole row when it is short (one round trip to L2 before the products start, not one per
    BLOCK_K tile), a loop over the row otherwise."""
    is_first = tl.program_id(0) == 0
    squares = tl.zeros((ROW_BLOCK,), dtype=tl.float32)
    for k0 in range(0, K, ROW_BLOCK):
        cols = k0 + tl.arange(0, ROW_BLOCK)
        col_ok = cols < K
        s = _residual_sum(x_ptr, r_ptr, cols, col_ok, RESIDUAL)
        if RESIDUAL:
            tl.store(r_out_ptr + cols, s, mask=col_ok & is_first)
        h = s.to(tl.float32)
        squares += h * h
    return tl.rsqrt(tl.sum(squares, axis=0) / K + eps)


@triton.jit
def _input_tile(x_ptr, r_ptr, norm_w_ptr, cols, col_ok, K, scale,
                NORM: tl.constexpr, RESIDUAL: tl.constexpr, GATED: tl.constexpr):
    """The GEMV's input at `cols`, in fp32: x itself, or what the fused small op would have
    written, rounded to x's dtype at the same steps."""
    dtype = x_ptr.dtype.element_ty
    if GATED:  # silu(gate) is rounded before the multiply, the product once (activation.py)
        gate = tl.load(x_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        up = tl.load(x_ptr + K + cols, mask=col_ok, other=0.0).to(tl.float32)
        silu = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
        x = (silu * up).to(dtype)
    else:
        x = _residual_sum(x_ptr, r_ptr, cols, col_ok, RESIDUAL)
        if NORM:  # normalised row rounded, then times the weight, rounded (rmsnorm.py)
            normed = (x.to(tl.float32) * scale).to(dtype).to(tl.float32)
            w = tl.load(norm_w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
            x = (w * normed).to(dtype)
    return x.to(tl.float32)


@triton.jit
def _weight_tile(w_rows, row_ok, cols, K):
    """The [BLOCK_N, BLOCK_K] tile of the weight rows at `cols` (zeros past K)."""
    return tl.load(w_rows + cols[None, :], mask=row_ok[:, None] & (cols < K)[None, :], other=0.0)


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, K, stride_w,
                 HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 # the prologues' arguments; the plain GEMV leaves them out
                 r_ptr=None, norm_w_ptr=None, r_out_ptr=None, eps=0.0,
                 # >>> ch26
                 scale_ptr=None, SCALED: tl.constexpr = False,  # an int8 weight's row scales
                 # <<< ch26
                 NORM: tl.constexpr = False, RESIDUAL: tl.constexpr = False,
                 GATED: tl.constexpr = False, ROW_BLOCK: tl.constexpr = 1,
                 PDL: tl.constexpr = False):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    w_rows = w_ptr + rows[:, None].to(tl.int64) * stride_w
    k_tile = tl.arange(0, BLOCK_K)
    if PDL:
        # The first weight tile before the wait: weights never change, so this trip to HBM
        # overlaps the previous kernel (pdl.py). Each later tile is loaded one iteration ahead.
        w = _weight_tile(w_rows, row_ok, k_tile, K)
        wait_for_previous_kernel(PDL)  # x, residual: the previous kernel's outputs
    scale = 1.0
    if NORM:
        scale = _rms_scale(x_ptr, r_ptr, r_out_ptr, K, eps, RESIDUAL, ROW_BLOCK)
    # Partial products stay per column until the end: one reduction instead of one per tile.
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + k_tile
        col_ok = cols < K
        if not PDL:
            w = _weight_tile(w_rows, row_ok, cols, K)
        x = _input_tile(x_ptr, r_ptr, norm_w_ptr, cols, col_ok, K, scale, NORM, RESIDUAL, GATED)
        acc += w.to(tl.float32) * x[None, :]
        if PDL:  # the next tile; past K after the last one, fully masked: nothing is read
            w = _weight_tile(w_rows, row_ok, cols + BLOCK_K, K)
    y = tl.sum(acc, axis=1)
    # >>> ch26
    if SCALED:  # int8 weights (chapter 26): w = q * scale[row], so the row's sum is scaled once
        y *= tl.load(scale_ptr + rows, mask=row_ok, other=0.0)
    # <<< ch26
    if HAS_BIAS:
        y += tl.load(b_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=row_ok)


def gemv_config(n: int, k: int, prologue: str = "none", pdl: bool = False
                ) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps), from the H200 sweep in benchmarks/gemv_shapes.py (weights
    read from HBM, as in a decode step): long rows (K >= 2048) in few-row tiles with long strides
    along K; short rows in narrow tiles too, many programs to keep enough loads in flight.
    `prologue` ("none", "norm", "gated") names the kernel's input computation: each program
    repeats it (the norm's mean square over the whole row, too), so fewer, wider programs win.
    With PDL (pdl.py) two shapes do better with other tiles: the H100 sweep of
    `benchmarks/gemv_chain.py --pdl` (h100_pdl.txt, 28 layers in a CUDA graph)."""
    if pdl and k >= 3072 and prologue == "gated":
        return 8, 2048, 8  # 3.59 us against 3.92 with (8, 4096, 8)
    if pdl and k < 2048 and prologue == "norm" and n <= 4096:
        return 4, 512, 4  # qkv_proj: 4.39 us against 4.86 with (8, 512, 4); gate_up keeps it
    if k >= 3072:
        return (8, 4096, 8) if prologue == "gated" else (2, 4096, 4)
    if k >= 2048:
        return 4, 2048, 4
    return (8, 512, 4) if prologue == "norm" else (2, 512, 2)


def _check(name: str, x: torch.Tensor, x_width: int, weight: torch.Tensor,
           bias: torch.Tensor | None) -> None:
    """x must be one row of x_width * K elements for weight [N, K]."""
    if x.dim() != 2 or x.shape[0] != 1 or weight.dim() != 2 or \
            x.shape[1] != x_width * weight.shape[1]:
        k = "K" if x_width == 1 else f"{x_width}K"
        raise ValueError(f"{name} takes x [1, {k}] and weight [N, K]; got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if x.dtype != weight.dtype or (bias is not None and bias.shape != (weight.shape[0],)):
        raise ValueError(f"{name}: x, weight and bias must share a dtype, and bias must be [N]")
    if weight.stride(1) != 1 or x.stride(1) != 1 or (bias is not None and bias.stride(0) != 1):
        raise ValueError(f"{name}: weight and x need a contiguous last axis, bias a contiguous "
                         f"one")


def _launch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
            prologue: str = "none", config: tuple[int, int, int] | None = None,
            **prologue_args) -> torch.Tensor:
    n, k = weight.shape
    out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    pdl = pdl_args(x.device, rows=1)
    block_n, block_k, warps = config or gemv_config(n, k, prologue, pdl["PDL"])
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x, weight, bias if bias is not None else weight, out, n, k, weight.stride(0),
        HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
        **prologue_args, **pdl)
    return out


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [1, K], weight: [N, K], bias: [N] or None -> [1, N] in x's dtype."""
    _check("gemv", x, 1, weight, bias)
    return _launch(x, weight, bias)


def gemv_rmsnorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                 norm_weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(gemv(rms_norm(s, norm_weight, eps), weight, bias), s) with s = x + residual, in one
    kernel; as fused_add_rms_norm, residual None (the first layer) means s is x itself.

    x, residual: [1, K]; norm_weight: [K]; all in weight's dtype. s is a new tensor (or x); the
    inputs are never written."""
    _check("gemv_rmsnorm", x, 1, weight, bias)
    k = weight.shape[1]
    if norm_weight.shape != (k,) or norm_weight.dtype != x.dtype or norm_weight.stride(0) != 1:
        raise ValueError(f"norm_weight {tuple(norm_weight.shape)} {norm_weight.dtype} must be a "
                         f"contiguous ({k},) tensor of x's dtype {x.dtype}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype
                                 or residual.stride(1) != 1):
        raise ValueError(f"residual {tuple(residual.shape)} {residual.dtype} does not match "
                         f"x {tuple(x.shape)} {x.dtype} (or its last axis is strided)")
    total = x if residual is None else torch.empty(1, k, dtype=x.dtype, device=x.device)
    out = _launch(x, weight, bias, "norm", r_ptr=x if residual is None else residual,
                  norm_w_ptr=norm_weight, r_out_ptr=total, eps=eps, NORM=True,
                  RESIDUAL=residual is not None, ROW_BLOCK=min(triton.next_power_of_2(k), 8192))
    return out, total


def gemv_silu_and_mul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
                      ) -> torch.Tensor:
    """gemv(silu_and_mul(x), weight, bias) in one kernel. x: [1, 2K] (gate then up, as
    gate_up_proj writes it), weight: [N, K] -> [1, N]."""
    _check("gemv_silu_and_mul", x, 2, weight, bias)
    return _launch(x, weight, bias, "gated", GATED=True)
