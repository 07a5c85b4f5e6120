"""What the attention kernels share: tile limits of tl.dot, its precision per input type, and
the load of one block of a request's K/V rows through its page-table row."""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

MIN_DOT_ROWS = 16  # tl.dot needs tiles of at least 16 x 16 on a GPU


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs: exact products ("ieee") instead of the GPU's default TF32 (a 10-bit mantissa),
    so an fp32 model matches the torch backend; bf16/fp16 products are exact either way."""
    return "ieee" if dtype == torch.float32 else "tf32"


# >>> ch20
def output_and_scale(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     out: torch.Tensor | None, sm_scale: float | None
                     ) -> tuple[torch.Tensor, float]:
    """The output tensor (a new one like q unless given) and the softmax scale (1/sqrt(D) unless
    given); the kernels index the head_dim axis as contiguous, so it must be."""
    out = torch.empty_like(q) if out is None else out
    for t in (q, k_cache, v_cache, out):
        assert t.stride(-1) == 1, "the head_dim axis must be contiguous"
    return out, (1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else sm_scale)


@triton.jit
def load_paged_kv(k_cache_ptr, v_cache_ptr, row_ptr, pos, end, dims, kv_head,
                  stride_ks, stride_kh, stride_vs, stride_vh, HEAD_DIM: tl.constexpr):
    """K and V of positions `pos` ([BLOCK_N]) of one request for one KV head, [BLOCK_N, BLOCK_D]
    each: the page-table row at `row_ptr` gives each position's pool slot. Positions at or past
    `end` and dims past HEAD_DIM load as zeros (the caller masks their scores)."""
    valid = pos < end
    slots = tl.load(row_ptr + pos, mask=valid, other=0).to(tl.int64)  # 64-bit: slot x stride
    kv_mask = valid[:, None] & (dims[None, :] < HEAD_DIM)
    k = tl.load(k_cache_ptr + slots[:, None] * stride_ks + kv_head * stride_kh + dims[None, :],
                mask=kv_mask, other=0.0)
    v = tl.load(v_cache_ptr + slots[:, None] * stride_vs + kv_head * stride_vh + dims[None, :],
                mask=kv_mask, other=0.0)
    return k, v
# <<< ch20
