"""Paged extend (prefill) attention: every request's new tokens in one launch.

Request b brings q_len = cu_q_lens[b+1] - cu_q_lens[b] new tokens on top of a cached prefix, and
has kv_len keys in all (prefix plus new; the new K/V are already stored in the pool). Its i-th
new token sits at position kv_len - q_len + i and sees the keys at positions up to its own: the
whole prefix, and the new tokens causally. All keys are read through the page table, the cached
prefix and this step's tokens alike, so a prefix-cache hit of any size costs nothing special.

Program (b, token block, head group) loads a [BLOCK_M, D] tile of queries and walks key blocks
up to the last position any of them may see, with an online softmax in fp32. Three things make
it cheaper than one program per (token block, head):

- GQA packing: the HEADS query heads of a group share one KV head, so the tile holds
  BLOCK_M / HEADS tokens x HEADS heads (row r is token r // HEADS, head r % HEADS) and every K/V
  block is loaded once for all of them.
- The causal mask only where it can bite: key blocks that end before the tile's first token are
  visible to every row and take the plain loop; only the last few blocks, on the diagonal, pay
  for the mask.
- The longest work first: the token blocks are numbered from the end of the prompt, so the
  programs with the most keys start in the first wave instead of trailing behind the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .common import MIN_DOT_ROWS, dot_precision, load_paged_kv, output_and_scale


@dataclass(frozen=True)
class ExtendConfig:
    """How the extend kernel tiles its work; benchmarks/tune_extend_attention.py times the
    candidates on a GPU."""

    block_m: int = 64  # query rows per program (tokens x heads of the group)
    block_n: int = 32  # keys per loop step
    num_warps: int = 4
    num_stages: int = 2
    pack_gqa: bool = True  # False: one query head per tile (for comparison)


# Measured on an H100 with benchmarks/tune_extend_attention.py (2026-12-07, 19 tilings checked
# and timed): on the official bench.py's first prefill batch (31 prompts, 15,705 tokens) small
# tiles win, 0.242 ms against 0.291 for 128 rows x 64 keys x 8 warps (many programs: the SMs stay
# busy and no tile trails far behind). One 1024-token prompt alone prefers large tiles (0.040 ms
# at 128 x 128 x 8 warps against 0.055), but one tiling serves every batch: a second one would
# compile the first time a batch picked it, in the middle of serving (a cold bench.py run with
# two tilings was ~6% slower on the H100, most likely for that reason; not measured apart:
# benchmarks/results/h100_ab_issue32_round2.txt).
EXTEND_CONFIG = ExtendConfig()  # the defaults above: 64 rows, 32 keys, 4 warps, 2 stages


def heads_per_program(group: int, block_m: int, pack_gqa: bool = True) -> int:
    """How many query heads of a GQA group share a tile: the largest power of two dividing the
    group (the row split r // HEADS, r % HEADS is then a shift and a mask), leaving at least
    MIN_DOT_ROWS / 2 tokens per tile."""
    heads = 1
    while pack_gqa and group % (heads * 2) == 0 and block_m // (heads * 2) >= MIN_DOT_ROWS // 2:
        heads *= 2
    return heads


@triton.jit
def _attend_block(q, acc, m_i, l_i, k_cache_ptr, v_cache_ptr, table_ptr, block_start, end,
                  q_pos, dims, kv_head, sm_scale, stride_ks, stride_kh, stride_vs, stride_vh,
                  HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
                  CAUSAL: tl.constexpr):
    """One key block into the running softmax: scores, the new maximum, the rescaled sums."""
    k_pos = block_start + tl.arange(0, BLOCK_N)
    k, v = load_paged_kv(k_cache_ptr, v_cache_ptr, table_ptr, k_pos, end, dims, kv_head,
                         stride_ks, stride_kh, stride_vs, stride_vh, HEAD_DIM)
    scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
    if CAUSAL:
        # A key is visible to a query at or after its position (this also drops keys past
        # `end`, which sit after every query of the tile).
        scores = tl.where(k_pos[None, :] <= q_pos[:, None], scores, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(scores, axis=1))
    alpha = tl.exp(m_i - m_new)  # rescales what was summed under the old maximum
    p = tl.exp(scores - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


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
    GROUP: tl.constexpr, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    TOKENS: tl.constexpr = BLOCK_M // HEADS  # new tokens per tile
    b = tl.program_id(0)
    # Blocks counted from the end of the longest prompt: the first wave gets the most keys.
    m_block = tl.num_programs(1) - 1 - tl.program_id(1)
    first_head = tl.program_id(2) * HEADS
    kv_head = first_head // GROUP

    q_start = tl.load(cu_q_lens_ptr + b)
    q_len = tl.load(cu_q_lens_ptr + b + 1) - q_start
    if m_block * TOKENS >= q_len:  # the grid is sized for the longest request
        return
    kv_len = tl.load(kv_lens_ptr + b)
    prefix = kv_len - q_len

    r = tl.arange(0, BLOCK_M)
    rows = m_block * TOKENS + r // HEADS  # index among this request's new tokens
    heads = first_head + r % HEADS
    dims = tl.arange(0, BLOCK_D)
    row_mask = (rows[:, None] < q_len) & (dims[None, :] < HEAD_DIM)
    tokens = (q_start + rows).to(tl.int64)
    q_offsets = tokens[:, None] * stride_qt + heads[:, None] * stride_qh + dims[None, :]
    q = tl.load(q_ptr + q_offsets, mask=row_mask, other=0.0)
    q_pos = prefix + rows

    table_ptr = page_table_ptr + tl.load(table_idx_ptr + b).to(tl.int64) * stride_pt
    first_pos = prefix + m_block * TOKENS  # the tile's first token
    # The last token of the tile sits at prefix + min(tile end, q_len) - 1: no key after it.
    end = prefix + tl.minimum((m_block + 1) * TOKENS, q_len)
    # Key blocks that end at or before first_pos are visible to every row of the tile.
    unmasked_end = (first_pos + 1) // BLOCK_N * BLOCK_N
    # A finite start for the running max keeps rows with no visible key free of NaN
    # (exp(-inf - (-inf))); only padding rows past q_len are like that, and they are not stored.
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for block_start in range(0, unmasked_end, BLOCK_N):
        acc, m_i, l_i = _attend_block(q, acc, m_i, l_i, k_cache_ptr, v_cache_ptr, table_ptr,
                                      block_start, end, q_pos, dims, kv_head, sm_scale,
                                      stride_ks, stride_kh, stride_vs, stride_vh,
                                      HEAD_DIM, BLOCK_N, DOT_PRECISION, False)
    for block_start in range(unmasked_end, end, BLOCK_N):
        acc, m_i, l_i = _attend_block(q, acc, m_i, l_i, k_cache_ptr, v_cache_ptr, table_ptr,
                                      block_start, end, q_pos, dims, kv_head, sm_scale,
                                      stride_ks, stride_kh, stride_vs, stride_vh,
                                      HEAD_DIM, BLOCK_N, DOT_PRECISION, True)

    out = acc / l_i[:, None]
    out_offsets = tokens[:, None] * stride_ot + heads[:, None] * stride_oh + dims[None, :]
    tl.store(out_ptr + out_offsets, out.to(out_ptr.dtype.element_ty), mask=row_mask)


def extend_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     page_table: torch.Tensor, table_idx: torch.Tensor, cu_q_lens: torch.Tensor,
                     kv_lens: torch.Tensor, max_q_len: int, *, out: torch.Tensor | None = None,
                     sm_scale: float | None = None,
                     config: ExtendConfig | None = None) -> torch.Tensor:
    """Attention of the new tokens of every request over its cached prefix and, causally, over
    each other.

    q: [T, H, D], all requests' new tokens concatenated; k_cache, v_cache: [slots, H_kv, D] (this
    step's K/V already stored); page_table: [rows, max_seq_len] int32; table_idx, kv_lens: [B]
    and cu_q_lens: [B + 1] int32 on the device; max_q_len: the longest request's new tokens
    (host-known, it sizes the grid). Returns out [T, H, D] (written into `out` when given)."""
    num_heads, head_dim = q.shape[1], q.shape[2]
    group = num_heads // k_cache.shape[1]
    cfg = config or EXTEND_CONFIG
    heads = heads_per_program(group, cfg.block_m, cfg.pack_gqa)
    out, sm_scale = output_and_scale(q, k_cache, v_cache, out, sm_scale)
    grid = (table_idx.shape[0], triton.cdiv(max_q_len, cfg.block_m // heads), num_heads // heads)
    _extend_kernel[grid](
        q, k_cache, v_cache, out, page_table, table_idx, cu_q_lens, kv_lens,
        sm_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1),
        out.stride(0), out.stride(1),
        page_table.stride(0),
        GROUP=group, HEADS=heads, HEAD_DIM=head_dim,
        BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        DOT_PRECISION=dot_precision(q.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
