"""Paged extend (prefill) attention: every request's new tokens in one launch.

Request b brings q_len = cu_q_lens[b+1] - cu_q_lens[b] new tokens on top of a cached prefix, and
has kv_len keys in all (prefix plus new; the new K/V are already stored in the pool). Its i-th
new token sits at position kv_len - q_len + i and sees the keys at positions up to its own: the
whole prefix, and the new tokens causally. All keys are read through the page table, the cached
prefix and this step's tokens alike, so a prefix-cache hit of any size costs nothing special.

Program (b, query block, head) loads BLOCK_M new queries of one head and walks key blocks up to
the last position any of those queries may see, with an online softmax in fp32.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .common import dot_precision, load_paged_kv, output_and_scale

BLOCK_M = 64  # queries per program
BLOCK_N = 64  # keys per loop step


@triton.jit
def _extend_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, out_ptr,
    page_table_ptr, table_idx_ptr, cu_q_lens_ptr, kv_lens_ptr,
    sm_scale,
    stride_qt, stride_qh,
    stride_ks, stride_kh,
    stride_vs, stride_vh,
    stride_ot, stride_oh,
    stride_pt,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    b = tl.program_id(0)
    m_block = tl.program_id(1)
    head = tl.program_id(2)
    kv_head = head // GROUP

    q_start = tl.load(cu_q_lens_ptr + b)
    q_len = tl.load(cu_q_lens_ptr + b + 1) - q_start
    if m_block * BLOCK_M >= q_len:  # the grid is sized for the longest request
        return
    kv_len = tl.load(kv_lens_ptr + b)
    prefix = kv_len - q_len

    rows = m_block * BLOCK_M + tl.arange(0, BLOCK_M)  # index among this request's new tokens
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < q_len) & (dims[None, :] < HEAD_DIM)
    tokens = (q_start + rows).to(tl.int64)
    q = tl.load(q_ptr + tokens[:, None] * stride_qt + head * stride_qh + dims[None, :],
                mask=row_mask, other=0.0)
    q_pos = prefix + rows

    table_row = tl.load(table_idx_ptr + b).to(tl.int64)
    # The last query of this block sits at prefix + min(block end, q_len) - 1: no key after it.
    end = prefix + tl.minimum((m_block + 1) * BLOCK_M, q_len)
    # A finite start for the running max keeps rows with no visible key free of NaN
    # (exp(-inf - (-inf))); only padding rows past q_len are like that, and they are not stored.
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for block_start in range(0, end, BLOCK_N):
        k_pos = block_start + tl.arange(0, BLOCK_N)
        k, v = load_paged_kv(k_cache_ptr, v_cache_ptr, page_table_ptr + table_row * stride_pt,
                             k_pos, end, dims, kv_head, stride_ks, stride_kh, stride_vs, stride_vh,
                             HEAD_DIM)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
        # Causal: a key is visible to a query at or after its position (this also drops keys
        # past `end`, which sit after every query of the block).
        scores = tl.where(k_pos[None, :] <= q_pos[:, None], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(out_ptr + tokens[:, None] * stride_ot + head * stride_oh + dims[None, :],
             out.to(out_ptr.dtype.element_ty), mask=row_mask)


def extend_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     page_table: torch.Tensor, table_idx: torch.Tensor, cu_q_lens: torch.Tensor,
                     kv_lens: torch.Tensor, max_q_len: int, *, out: torch.Tensor | None = None,
                     sm_scale: float | None = None) -> torch.Tensor:
    """Attention of the new tokens of every request over its cached prefix and, causally, over
    each other.

    q: [T, H, D], all requests' new tokens concatenated; k_cache, v_cache: [slots, H_kv, D] (this
    step's K/V already stored); page_table: [rows, max_seq_len] int32; table_idx, kv_lens: [B]
    and cu_q_lens: [B + 1] int32 on the device; max_q_len: the longest request's new tokens
    (host-known, it sizes the grid). Returns out [T, H, D] (written into `out` when given)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    num_kv_heads = k_cache.shape[1]
    out, sm_scale = output_and_scale(q, k_cache, v_cache, out, sm_scale)
    grid = (table_idx.shape[0], triton.cdiv(max_q_len, BLOCK_M), num_heads)
    _extend_kernel[grid](
        q, k_cache, v_cache, out, page_table, table_idx, cu_q_lens, kv_lens,
        sm_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1),
        out.stride(0), out.stride(1),
        page_table.stride(0),
        GROUP=num_heads // num_kv_heads, HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
        DOT_PRECISION=dot_precision(q.dtype),
    )
    return out
