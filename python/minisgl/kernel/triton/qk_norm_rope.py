"""Qwen3's per-head q/k RMSNorm and RoPE, for q and k together, in one launch.

In torch this is about thirty small kernels per layer: q and k are strided views of the qkv
projection output, so normalising them first copies them; then each gets cast, squared, averaged,
scaled and multiplied by its weight; RoPE gathers the cos/sin rows of every token's position,
casts them, and does neg, cat, two multiplies and an add for q and again for k.

Here program (token, head) reads one head straight from the qkv row (q heads first, then k heads:
exactly the layout of LinearQKVMerged's output, so head h sits at h * head_dim for both), looks up
its token's position and the cos/sin rows of the RotaryEmbedding tables itself, and writes the
rotated head once. V is not touched: it stays a view of qkv. Without q/k norm weights (Llama,
Qwen2) the same kernel only rotates.

Rounding as in torch and Hugging Face: the normalised head is rounded to the input dtype before
the weight multiply, the product is rounded again (it is what RoPE's input is there), cos/sin are
rounded to the input dtype; the rotation itself is computed in fp32 and rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import pdl_args, wait_for_previous_kernel


@triton.jit
def _qk_norm_rope_kernel(
    qkv_ptr, positions_ptr, cos_ptr, sin_ptr, q_weight_ptr, k_weight_ptr, out_ptr,
    stride_qkv, stride_out_t, stride_out_h, stride_table,
    eps,
    NUM_Q_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, HALF_PAD: tl.constexpr,
    HAS_NORM: tl.constexpr, PDL: tl.constexpr = False,
):
    wait_for_previous_kernel(PDL)
    token = tl.program_id(0).to(tl.int64)
    head = tl.program_id(1)
    half: tl.constexpr = HEAD_DIM // 2
    dims = tl.arange(0, HALF_PAD)
    mask = dims < half
    src = qkv_ptr + token * stride_qkv + head * HEAD_DIM + dims
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)  # first half of the head
    x2 = tl.load(src + half, mask=mask, other=0.0).to(tl.float32)  # second half
    dtype = out_ptr.dtype.element_ty

    if HAS_NORM:
        mean_square = (tl.sum(x1 * x1, axis=0) + tl.sum(x2 * x2, axis=0)) / HEAD_DIM
        inv_rms = tl.rsqrt(mean_square + eps)
        if head < NUM_Q_HEADS:
            w_ptr = q_weight_ptr
        else:
            w_ptr = k_weight_ptr
        w1 = tl.load(w_ptr + dims, mask=mask, other=0.0).to(tl.float32)
        w2 = tl.load(w_ptr + half + dims, mask=mask, other=0.0).to(tl.float32)
        x1 = (w1 * (x1 * inv_rms).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
        x2 = (w2 * (x2 * inv_rms).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)

    # neox layout: channel i pairs with i + half; out = x * cos + rotate_half(x) * sin with
    # rotate_half(x) = (-x2, x1).
    pos = tl.load(positions_ptr + token).to(tl.int64)
    table = pos * stride_table + dims
    cos1 = tl.load(cos_ptr + table, mask=mask, other=0.0).to(dtype).to(tl.float32)
    cos2 = tl.load(cos_ptr + table + half, mask=mask, other=0.0).to(dtype).to(tl.float32)
    sin1 = tl.load(sin_ptr + table, mask=mask, other=0.0).to(dtype).to(tl.float32)
    sin2 = tl.load(sin_ptr + table + half, mask=mask, other=0.0).to(dtype).to(tl.float32)
    dst = out_ptr + token * stride_out_t + head * stride_out_h + dims
    tl.store(dst, (x1 * cos1 - x2 * sin1).to(dtype), mask=mask)
    tl.store(dst + half, (x2 * cos2 + x1 * sin2).to(dtype), mask=mask)


def qk_norm_rope(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor,
                 sin: torch.Tensor, num_q_heads: int, num_kv_heads: int, head_dim: int,
                 q_weight: torch.Tensor | None = None, k_weight: torch.Tensor | None = None,
                 eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """q and k of every token, normalised per head (when the weights are given) and rotated.

    qkv: [tokens, (num_q_heads + 2 * num_kv_heads) * head_dim], the merged projection output
    (rows may be strided, the last axis must be contiguous); positions: [tokens] int;
    cos, sin: [max_position, head_dim] fp32 tables (RotaryEmbedding's, neox layout).
    Returns q [tokens, num_q_heads, head_dim] and k [tokens, num_kv_heads, head_dim]: views of one
    new [tokens, num_q_heads + num_kv_heads, head_dim] tensor (so their rows are strided)."""
    tokens = qkv.shape[0]
    heads = num_q_heads + num_kv_heads
    if qkv.dim() != 2 or qkv.shape[1] != (heads + num_kv_heads) * head_dim:
        raise ValueError(f"qkv has shape {tuple(qkv.shape)}, expected [tokens, "
                         f"{(heads + num_kv_heads) * head_dim}]")
    if qkv.stride(1) != 1:
        raise ValueError("qkv: the last axis must be contiguous")
    if head_dim % 2 != 0:
        raise ValueError(f"head_dim {head_dim} must be even for RoPE")
    if positions.shape != (tokens,):
        raise ValueError(f"positions has shape {tuple(positions.shape)}, expected ({tokens},)")
    for name, table in (("cos", cos), ("sin", sin)):
        if table.dim() != 2 or table.shape[1] != head_dim or table.stride(1) != 1:
            raise ValueError(f"{name} must be [max_position, {head_dim}] with a contiguous row")
    if cos.stride(0) != sin.stride(0):
        raise ValueError("cos and sin must have the same row stride")
    has_norm = q_weight is not None
    if has_norm != (k_weight is not None):
        raise ValueError("give both q_weight and k_weight, or neither")
    if has_norm and (q_weight.shape != (head_dim,) or k_weight.shape != (head_dim,)):
        raise ValueError(f"q/k norm weights must have shape ({head_dim},)")
    out = torch.empty(tokens, heads, head_dim, dtype=qkv.dtype, device=qkv.device)
    if tokens > 0:
        _qk_norm_rope_kernel[(tokens, heads)](
            qkv, positions, cos, sin,
            q_weight if has_norm else qkv, k_weight if has_norm else qkv, out,
            qkv.stride(0), out.stride(0), out.stride(1), cos.stride(0),
            eps,
            NUM_Q_HEADS=num_q_heads, HEAD_DIM=head_dim,
            HALF_PAD=triton.next_power_of_2(head_dim // 2), HAS_NORM=has_norm,
            num_warps=1, **pdl_args(qkv.device, tokens),
        )
    return out[:, :num_q_heads], out[:, num_q_heads:]
