"""Paged decode attention: one new query token per request, the whole batch in one launch.

Every request reads its K/V through its page table row (`page_table[table_idx[b], pos]` is the
pool slot of position `pos`), so any page size works. Two ideas make it fast:

- Grouped-query attention: the G = H / H_kv query heads that share a KV head are one program's
  [G, D] query tile, so each K/V block is loaded once for all of them and `tl.dot` does the math.
  `tl.dot` wants at least 16 rows, so the tile is padded up to 16 (the extra rows are never stored).
- Flash-decoding (split-K): with few requests there are too few (request, KV head) programs to
  fill the GPU, so each request's sequence is cut into `num_splits` pieces handled by separate
  programs. Stage 1 writes each piece's normalised output and log-sum-exp into a workspace;
  stage 2 merges the pieces with the softmax weights exp(lse_s - max lse).

The launch never looks at the lengths on the host: the grid depends only on the batch size and
`num_splits`, and a split past the end of its request returns at once. Chapter 15 captures this
in a CUDA graph and replays it while the lengths change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .common import MIN_DOT_ROWS, dot_precision, load_paged_kv, output_and_scale
from .pdl import pdl_args, wait_for_previous_kernel


@dataclass(frozen=True)
class DecodeConfig:
    """How the decode kernel cuts its work. benchmarks/tune_decode_attention.py sweeps these on a
    GPU and prints the best one per shape in this form."""

    block_n: int = 64  # keys per loop step
    num_warps: int = 4
    num_stages: int = 2  # key blocks in flight (software pipelining of the loads)
    programs_per_sm: float = 2.0  # split until (request, KV head, split) programs ~ this x SMs
    max_splits: int = 32


# The config for batches of up to `max_batch` requests: the first row that fits is used. Put the
# tuning sweep's winners here, one row per batch-size range (the last row covers the rest).
DECODE_CONFIGS: list[tuple[int, DecodeConfig]] = [
    # Measured on the H200 with benchmarks/tune_decode_attention.py (2026-12-02; the table it
    # printed is in benchmarks/results/h200_tune_decode_attention.txt).
    (1, DecodeConfig(block_n=64, num_warps=4, num_stages=2, programs_per_sm=4.0, max_splits=64)),
    (4, DecodeConfig(block_n=64, num_warps=2, num_stages=3, programs_per_sm=4.0, max_splits=64)),
    (16, DecodeConfig(block_n=128, num_warps=4, num_stages=2, programs_per_sm=1.0, max_splits=64)),
    (1 << 31, DecodeConfig(block_n=64, num_warps=2, num_stages=3, programs_per_sm=1.0,
                           max_splits=64)),
]


def decode_config(batch_size: int) -> DecodeConfig:
    return next(cfg for max_batch, cfg in DECODE_CONFIGS if batch_size <= max_batch)


@dataclass
class DecodeWorkspace:
    """Scratch for stage 1's partial results, allocated once for the largest batch so that a
    CUDA graph can keep pointing at it."""

    partial_out: torch.Tensor  # [max_batch, num_qo_heads, max_splits, head_dim] fp32
    partial_lse: torch.Tensor  # [max_batch, num_qo_heads, max_splits] fp32

    @classmethod
    def allocate(cls, max_batch: int, num_qo_heads: int, head_dim: int,
                 device: torch.device | str,
                 max_splits: int = DecodeConfig.max_splits) -> DecodeWorkspace:
        out = torch.empty(max_batch, num_qo_heads, max_splits, head_dim, dtype=torch.float32,
                          device=device)
        lse = torch.empty(max_batch, num_qo_heads, max_splits, dtype=torch.float32, device=device)
        return cls(out, lse)

    @property
    def max_splits(self) -> int:
        return self.partial_lse.shape[2]


def choose_num_splits(batch_size: int, num_kv_heads: int, max_seq_len: int,
                      device: torch.device, config: DecodeConfig | None = None) -> int:
    """How many pieces to cut each sequence into, from host-known sizes only (never the lengths).

    On a GPU: enough (request, KV head, split) programs to give every SM `programs_per_sm` (two
    by default), but no more splits than the longest possible sequence (`max_seq_len`, the page
    table's width) has key blocks. Under the CPU interpreter programs run one after another, so
    splitting only adds work."""
    if device.type != "cuda":
        return 1
    cfg = config or decode_config(batch_size)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    wanted = math.ceil(cfg.programs_per_sm * sms / (batch_size * num_kv_heads))
    return max(1, min(wanted, cfg.max_splits, triton.cdiv(max_seq_len, cfg.block_n)))


def max_num_splits(num_kv_heads: int, max_seq_len: int, device: torch.device) -> int:
    """The most splits any batch size gets: what a workspace shared by all of them must hold.
    Within one row of DECODE_CONFIGS the smallest batch of its range splits the most."""
    smallest = [1] + [max_batch + 1 for max_batch, _ in DECODE_CONFIGS[:-1]]
    return max(choose_num_splits(b, num_kv_heads, max_seq_len, device) for b in smallest)


@triton.jit
def _decode_split_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, table_idx_ptr, kv_lens_ptr,
    partial_out_ptr, partial_lse_ptr, out_ptr,
    k_new_ptr, v_new_ptr, out_loc_ptr,
    sm_scale,
    stride_qb, stride_qh,
    stride_knb, stride_knh, stride_vnb, stride_vnh,
    stride_ks, stride_kh,
    stride_vs, stride_vh,
    stride_pt,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    stride_outb, stride_outh,
    num_splits,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    DOT_PRECISION: tl.constexpr, DIRECT: tl.constexpr, APPEND: tl.constexpr = False,
    PDL: tl.constexpr = False,
):
    """Stage 1. Program (b, kv_head, split): the GROUP query heads of this KV head against keys
    [split_start, split_end) of request b, with an online softmax in fp32. DIRECT (one split):
    the result is final and goes straight to `out`, and stage 2 is not launched. APPEND: this
    step's K/V are not in the pool yet; the program whose keys include the new token (position
    kv_len - 1, slot out_loc[b]) writes them there first, for its KV head."""
    wait_for_previous_kernel(PDL)  # before any load: q and this step's K/V are just written
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    kv_len = tl.load(kv_lens_ptr + b)
    # Splits cover whole key blocks: ceil(kv_len / num_splits) rounded up to BLOCK_N. Stage 2
    # recomputes the same ranges, so an empty split (short request) needs to write nothing.
    split_len = tl.cdiv(tl.cdiv(kv_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, kv_len)
    if not DIRECT:
        if start >= end:  # with DIRECT, a length-0 request (padding) must still write zeros
            return

    groups = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, BLOCK_D)
    if APPEND:
        # The store_kv of the unfused path, done by the one program that reads the new token:
        # the splits cut [0, kv_len) into disjoint ranges, so no other program reads that slot.
        # A padding row (length 0) holds no new token and writes nothing.
        if (start <= kv_len - 1) & (kv_len - 1 < end):
            slot = tl.load(out_loc_ptr + b).to(tl.int64)
            d_ok = dims < HEAD_DIM
            k_new = tl.load(k_new_ptr + b * stride_knb + kv_head * stride_knh + dims, mask=d_ok)
            v_new = tl.load(v_new_ptr + b * stride_vnb + kv_head * stride_vnh + dims, mask=d_ok)
            tl.store(k_cache_ptr + slot * stride_ks + kv_head * stride_kh + dims, k_new, mask=d_ok)
            tl.store(v_cache_ptr + slot * stride_vs + kv_head * stride_vh + dims, v_new, mask=d_ok)
        tl.debug_barrier()  # the stores are seen by every thread of the program's loop below
    heads = kv_head * GROUP + groups
    q_mask = (groups[:, None] < GROUP) & (dims[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + dims[None, :], mask=q_mask,
                other=0.0)

    row = tl.load(table_idx_ptr + b).to(tl.int64)
    # A finite start for the running max: a row whose keys are all masked then keeps weight 0
    # instead of computing exp(-inf - (-inf)) = NaN.
    m_i = tl.full([GROUP_PAD], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], dtype=tl.float32)
    for block_start in range(start, end, BLOCK_N):
        pos = block_start + tl.arange(0, BLOCK_N)
        valid = pos < end
        k, v = load_paged_kv(k_cache_ptr, v_cache_ptr, page_table_ptr + row * stride_pt, pos, end,
                             dims, kv_head, stride_ks, stride_kh, stride_vs, stride_vh, HEAD_DIM)
        scores = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * sm_scale
        scores = tl.where(valid[None, :], scores, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(scores, axis=1))
        alpha = tl.exp(m_i - m_new)  # rescales what was summed under the old max
        p = tl.exp(scores - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    if DIRECT:
        out = acc / tl.maximum(l_i, 1.0e-30)[:, None]  # no keys (length 0): zeros, not NaN
        tl.store(out_ptr + b * stride_outb + heads[:, None] * stride_outh + dims[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=q_mask)
    else:
        out = acc / l_i[:, None]
        out_offsets = (b * stride_ob + heads[:, None] * stride_oh + split * stride_os
                       + dims[None, :])
        tl.store(partial_out_ptr + out_offsets, out, mask=q_mask)
        lse_offsets = b * stride_lb + heads * stride_lh + split
        tl.store(partial_lse_ptr + lse_offsets, m_i + tl.log(l_i), mask=groups < GROUP)


@triton.jit
def _decode_merge_kernel(
    partial_out_ptr, partial_lse_ptr, kv_lens_ptr, out_ptr,
    stride_ob, stride_oh, stride_os,
    stride_lb, stride_lh,
    stride_outb, stride_outh,
    num_splits,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    SPLITS_PAD: tl.constexpr, PDL: tl.constexpr = False,
):
    """Stage 2. Program (b, head): out = sum_s w_s * out_s / sum_s w_s, w_s = exp(lse_s - max)."""
    wait_for_previous_kernel(PDL)
    b = tl.program_id(0)
    head = tl.program_id(1)

    kv_len = tl.load(kv_lens_ptr + b)
    split_len = tl.cdiv(tl.cdiv(kv_len, num_splits), BLOCK_N) * BLOCK_N
    splits = tl.arange(0, SPLITS_PAD)
    written = (splits < num_splits) & (splits * split_len < kv_len)  # the non-empty splits
    dims = tl.arange(0, BLOCK_D)

    lse = tl.load(partial_lse_ptr + b * stride_lb + head * stride_lh + splits, mask=written,
                  other=float("-inf"))
    # The floor keeps a request with no split (all lse -inf) at weight 0 instead of NaN.
    weights = tl.exp(lse - tl.maximum(tl.max(lse, axis=0), -1.0e30))
    parts = tl.load(partial_out_ptr + b * stride_ob + head * stride_oh
                    + splits[:, None] * stride_os + dims[None, :],
                    mask=written[:, None] & (dims[None, :] < HEAD_DIM), other=0.0)
    # A request of length 0 (a padding row of a captured batch) has no split: write zeros.
    total = tl.maximum(tl.sum(weights, axis=0), 1.0e-30)
    out = tl.sum(parts * weights[:, None], axis=0) / total
    tl.store(out_ptr + b * stride_outb + head * stride_outh + dims,
             out.to(out_ptr.dtype.element_ty), mask=dims < HEAD_DIM)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     page_table: torch.Tensor, table_idx: torch.Tensor, kv_lens: torch.Tensor,
                     *, num_splits: int | None = None, workspace: DecodeWorkspace | None = None,
                     out: torch.Tensor | None = None, sm_scale: float | None = None,
                     config: DecodeConfig | None = None,
                     new_kv: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
                     ) -> torch.Tensor:
    """Attention of one new token per request over its whole paged sequence.

    q: [B, H, D]; k_cache, v_cache: [slots, H_kv, D] (this step's K/V already stored, unless
    new_kv brings them); page_table: [rows, max_seq_len] int32; table_idx, kv_lens: [B] int32 on
    the device. Returns out [B, H, D] (written into `out` when given). Pass a preallocated
    `workspace` and a fixed `num_splits` to launch without allocating, e.g. inside a CUDA graph.
    `config` (tiling) defaults to DECODE_CONFIGS' row for this batch size. `new_kv` = (k, v,
    out_loc), k and v [B, H_kv, D], out_loc [B]: the kernel stores this step's K/V at the slots
    out_loc itself (what store_kv would do first), one kernel fewer per layer."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    cfg = config or decode_config(batch)
    if num_splits is None:
        num_splits = choose_num_splits(batch, num_kv_heads, page_table.shape[1], q.device, cfg)
    if workspace is None:
        workspace = DecodeWorkspace.allocate(batch, num_heads, head_dim, q.device, num_splits)
    if num_splits > workspace.max_splits or batch > workspace.partial_lse.shape[0]:
        raise ValueError(f"workspace holds {workspace.partial_lse.shape[0]} requests x "
                         f"{workspace.max_splits} splits; asked {batch} x {num_splits}")
    out, sm_scale = output_and_scale(q, k_cache, v_cache, out, sm_scale)
    k_new, v_new, out_loc = _checked_new_kv(new_kv, batch, num_kv_heads, head_dim, k_cache)
    block_d = triton.next_power_of_2(head_dim)
    partial_out, partial_lse = workspace.partial_out, workspace.partial_lse
    # num_splits is a runtime argument, not a constexpr, and the merge always covers the
    # workspace's capacity: the split count changes with the batch size, and every new constexpr
    # value would compile another kernel in the middle of serving.
    direct = num_splits == 1  # two compiled variants at most, whatever the split count
    pdl = pdl_args(q.device, batch)  # both stages: one request means a batch-1 decode step

    _decode_split_kernel[(batch, num_kv_heads, num_splits)](
        q, k_cache, v_cache, page_table, table_idx, kv_lens, partial_out, partial_lse, out,
        k_new, v_new, out_loc,
        sm_scale,
        q.stride(0), q.stride(1),
        k_new.stride(0), k_new.stride(1), v_new.stride(0), v_new.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1),
        page_table.stride(0),
        partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
        partial_lse.stride(0), partial_lse.stride(1),
        out.stride(0), out.stride(1),
        num_splits,
        GROUP=group, GROUP_PAD=max(MIN_DOT_ROWS, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_N=cfg.block_n,
        DOT_PRECISION=dot_precision(q.dtype), DIRECT=direct, APPEND=new_kv is not None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl,
    )
    if direct:
        return out
    _decode_merge_kernel[(batch, num_heads)](
        partial_out, partial_lse, kv_lens, out,
        partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
        partial_lse.stride(0), partial_lse.stride(1),
        out.stride(0), out.stride(1),
        num_splits,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_N=cfg.block_n,
        SPLITS_PAD=triton.next_power_of_2(workspace.max_splits), **pdl,
    )
    return out


def _checked_new_kv(new_kv: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None, batch: int,
                    num_kv_heads: int, head_dim: int, k_cache: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """new_kv's three tensors, checked; without new_kv, stand-ins the kernel never reads."""
    if new_kv is None:
        return k_cache, k_cache, k_cache  # APPEND=False compiles their loads out
    k, v, out_loc = new_kv
    for name, t in (("k", k), ("v", v)):
        if t.shape != (batch, num_kv_heads, head_dim) or t.stride(2) != 1:
            raise ValueError(f"new_kv's {name} must be [{batch}, {num_kv_heads}, {head_dim}] with "
                             f"a contiguous last axis; got {tuple(t.shape)}, strides {t.stride()}")
        if t.device != k_cache.device:
            raise ValueError(f"new_kv's {name} is on {t.device}, the pool on {k_cache.device}")
    if out_loc.shape != (batch,) or out_loc.is_floating_point() or out_loc.device != k_cache.device:
        raise ValueError(f"new_kv's out_loc must be [{batch}] integer slots on {k_cache.device}; "
                         f"got {tuple(out_loc.shape)} {out_loc.dtype} on {out_loc.device}")
    return k, v, out_loc
