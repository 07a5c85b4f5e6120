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
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _gemv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, K, stride_w,
                 HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    # Partial products stay per column until the end: one reduction instead of one per tile.
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        col_ok = cols < K
        w = tl.load(w_ptr + rows[:, None].to(tl.int64) * stride_w + cols[None, :],
                    mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)
        acc += w.to(tl.float32) * x.to(tl.float32)[None, :]
    y = tl.sum(acc, axis=1)
    if HAS_BIAS:
        y += tl.load(b_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, y.to(out_ptr.dtype.element_ty), mask=row_ok)


def gemv_config(n: int, k: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_K, num_warps), from the H200 sweep in benchmarks/gemv_shapes.py: long rows
    (K >= 2048) in few-row tiles with long strides along K; short rows in wider tiles."""
    if k >= 2048:
        return 2, 1024, 4
    return (4 if n <= 4096 else 8), 256, 2


def gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x: [1, K], weight: [N, K], bias: [N] or None -> [1, N] in x's dtype."""
    if x.dim() != 2 or x.shape[0] != 1 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"gemv takes x [1, K] and weight [N, K]; got {tuple(x.shape)} and "
                         f"{tuple(weight.shape)}")
    if x.dtype != weight.dtype or (bias is not None and bias.shape != (weight.shape[0],)):
        raise ValueError("x, weight and bias must share a dtype, and bias must be [N]")
    if weight.stride(1) != 1 or x.stride(1) != 1:
        raise ValueError("weight and x need a contiguous last axis")
    n, k = weight.shape
    out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    block_n, block_k, warps = gemv_config(n, k)
    _gemv_kernel[(triton.cdiv(n, block_n),)](
        x, weight, bias if bias is not None else weight, out, n, k, weight.stride(0),
        HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps)
    return out
