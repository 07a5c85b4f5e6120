"""Paged decode attention: one new query token per request, the whole batch in one launch.

Every request reads its K/V through its page table row (`page_table[table_idx[b], pos]` is the
pool slot of position `pos`), so any page size works. Three ideas make it fast:

- Grouped-query attention: the G = H / H_kv query heads that share a KV head are one program's
  [G, D] query tile, so each K/V block is loaded once for all of them and `tl.dot` does the math.
  `tl.dot` wants at least 16 rows, so the tile is padded up to 16 (the extra rows are never stored).
- Flash-decoding (split-K) in equal pieces: the batch's keys are cut into pieces of one size,
  about B * num_splits of them (the mean length over num_splits, rounded up to whole key
  blocks). A request of average length is num_splits pieces, a long one more, a short one
  fewer; every (piece, KV head) is a program. With few requests num_splits is large so that the
  pieces fill the GPU; with many requests of uneven lengths, equal pieces keep one long request
  from running alone after all the short ones have finished.
- One launch: a request in one piece writes its output directly. Otherwise each piece writes its
  normalised output and log-sum-exp into a workspace and counts itself in with an atomic add;
  the piece that arrives last merges them all with the softmax weights exp(lse_s - max lse) and
  sets the count back to zero. No second kernel, so a request that is not split costs nothing
  extra.

The launch never looks at the lengths on the host: every program computes the cut from kv_lens
itself (the lengths of a batch of up to a few hundred requests are one small load and a prefix
sum), and the grid, B * (num_splits + 1) pieces, is the most any cut can make (the pieces past
the cut return at once). Chapter 15 captures this in a CUDA graph and replays it while the
lengths change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .common import MIN_DOT_ROWS, dot_precision, load_paged_kv, output_and_scale


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
    """Scratch for the pieces' partial results, allocated once for the largest batch so that a
    CUDA graph can keep pointing at it. A batch of B requests cut into num_splits pieces each on
    average has at most B * (num_splits + 1) pieces (see the module docstring)."""

    partial_out: torch.Tensor  # [pieces, num_qo_heads, head_dim] fp32
    partial_lse: torch.Tensor  # [pieces, num_qo_heads] fp32
    # [max_batch, num_qo_heads] int32, zeros between calls: how many pieces of (request, KV
    # head) have finished; the last one merges them and sets the count back to 0
    arrivals: torch.Tensor
    max_splits: int

    @classmethod
    def allocate(cls, max_batch: int, num_qo_heads: int, head_dim: int,
                 device: torch.device | str, max_splits: int = DecodeConfig.max_splits,
                 max_pieces: int | None = None) -> DecodeWorkspace:
        """max_pieces: room for fewer pieces than max_batch * (max_splits + 1), when only small
        batches split much (max_pieces_for below)."""
        pieces = max_pieces or max_batch * (max_splits + 1)
        out = torch.empty(pieces, num_qo_heads, head_dim, dtype=torch.float32, device=device)
        lse = torch.empty(pieces, num_qo_heads, dtype=torch.float32, device=device)
        arrivals = torch.zeros(max_batch, num_qo_heads, dtype=torch.int32, device=device)
        return cls(out, lse, arrivals, max_splits)

    @property
    def max_batch(self) -> int:
        return self.arrivals.shape[0]


def choose_num_splits(batch_size: int, num_kv_heads: int, max_seq_len: int,
                      device: torch.device, config: DecodeConfig | None = None) -> int:
    """How many pieces to cut each sequence into on average, from host-known sizes only (never
    the lengths).

    On a GPU: enough (piece, KV head) programs to give every SM `programs_per_sm`, but no more
    splits than the longest possible sequence (`max_seq_len`, the page table's width) has key
    blocks. At least 1: then a request longer than the batch's mean is still cut (equal pieces).
    Under the CPU interpreter programs run one after another, so more splits only add work."""
    if device.type != "cuda":
        return 1
    cfg = config or decode_config(batch_size)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    wanted = math.ceil(cfg.programs_per_sm * sms / (batch_size * num_kv_heads))
    return max(1, min(wanted, cfg.max_splits, triton.cdiv(max_seq_len, cfg.block_n)))


def max_num_splits(num_kv_heads: int, max_seq_len: int, device: torch.device) -> int:
    """The most splits any batch size gets. Within one row of DECODE_CONFIGS the smallest batch
    of its range splits the most."""
    smallest = [1] + [max_batch + 1 for max_batch, _ in DECODE_CONFIGS[:-1]]
    return max(choose_num_splits(b, num_kv_heads, max_seq_len, device) for b in smallest)


def max_pieces_for(max_batch: int, num_kv_heads: int, max_seq_len: int,
                   device: torch.device) -> int:
    """The most pieces any batch of up to max_batch requests can be cut into: the room a
    workspace shared by all of them needs (b * (splits + 1) for each batch size b)."""
    return max(b * (choose_num_splits(b, num_kv_heads, max_seq_len, device) + 1)
               for b in range(1, max_batch + 1))


@triton.jit
def _cut(kv_lens_ptr, batch, num_splits, BATCH_PAD: tl.constexpr, BLOCK_N: tl.constexpr):
    """The batch's cut into pieces, computed the same way by every program: each request's
    length, its piece count and the end of its pieces in piece order, and the piece size (the
    mean length over num_splits, rounded up to whole key blocks)."""
    idx = tl.arange(0, BATCH_PAD)
    real = idx < batch
    lens = tl.load(kv_lens_ptr + idx, mask=real, other=0)
    total = tl.sum(lens, axis=0)
    chunk = tl.maximum(tl.cdiv(tl.cdiv(total, batch * num_splits), BLOCK_N) * BLOCK_N, BLOCK_N)
    # a length-0 request (CUDA-graph padding) is one empty piece: it must still write zeros
    counts = tl.where(real, tl.maximum(tl.cdiv(lens, chunk), 1), 0)
    return idx, lens, counts, tl.cumsum(counts, axis=0), chunk


@triton.jit
def _decode_piece_kernel(
    q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, table_idx_ptr, kv_lens_ptr,
    partial_out_ptr, partial_lse_ptr, arrivals_ptr, out_ptr,
    sm_scale,
    stride_qb, stride_qh,
    stride_ks, stride_kh,
    stride_vs, stride_vh,
    stride_pt,
    stride_po, stride_ph,
    stride_lp,
    stride_ab,
    stride_outb, stride_outh,
    batch, num_splits,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
    BATCH_PAD: tl.constexpr, MERGE_BLOCK: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Program (piece, kv_head): the GROUP query heads of this KV head against the piece's keys,
    with an online softmax in fp32. A request in one piece writes its output directly; otherwise
    the piece writes its normalised output and log-sum-exp, and the last piece of the request to
    finish merges them all."""
    piece = tl.program_id(0)
    kv_head = tl.program_id(1)
    idx, lens, counts, ends, chunk = _cut(kv_lens_ptr, batch, num_splits, BATCH_PAD, BLOCK_N)
    b = tl.sum((ends <= piece).to(tl.int32), axis=0)  # requests whose pieces all come before
    if b >= batch:  # the grid has room for the most pieces a cut can make; this one is unused
        return
    mine = idx == b
    kv_len = tl.sum(tl.where(mine, lens, 0), axis=0)
    count = tl.sum(tl.where(mine, counts, 0), axis=0)
    first = tl.sum(tl.where(mine, ends, 0), axis=0) - count
    start = (piece - first) * chunk
    end = tl.minimum(start + chunk, kv_len)

    groups = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, BLOCK_D)
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

    out_rows = out_ptr + b * stride_outb + heads[:, None] * stride_outh + dims[None, :]
    if count == 1:
        out = acc / tl.maximum(l_i, 1.0e-30)[:, None]  # no keys (length 0): zeros, not NaN
        tl.store(out_rows, out.to(out_ptr.dtype.element_ty), mask=q_mask)
    else:
        tl.store(partial_out_ptr + piece * stride_po + heads[:, None] * stride_ph + dims[None, :],
                 acc / l_i[:, None], mask=q_mask)
        tl.store(partial_lse_ptr + piece * stride_lp + heads, m_i + tl.log(l_i),
                 mask=groups < GROUP)
        # Every thread's stores before the count goes up (the barrier), released to the GPU
        # with it (acq_rel): the program that sees count - 1 then reads all pieces complete.
        tl.debug_barrier()
        counter = arrivals_ptr + b * stride_ab + kv_head
        if tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == count - 1:
            _merge_pieces(partial_out_ptr, partial_lse_ptr, out_rows, first, count,
                          kv_head * GROUP, groups, dims, q_mask, stride_po, stride_ph, stride_lp,
                          GROUP, GROUP_PAD, HEAD_DIM, BLOCK_D, MERGE_BLOCK)
            tl.store(counter, 0)  # ready for the next call (and the next graph replay)


@triton.jit
def _merge_pieces(partial_out_ptr, partial_lse_ptr, out_rows, first, count, first_head, groups,
                  dims, q_mask, stride_po, stride_ph, stride_lp, GROUP: tl.constexpr,
                  GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                  MERGE_BLOCK: tl.constexpr):
    """out = sum_s w_s * out_s / sum_s w_s with w_s = exp(lse_s - max), for the GROUP heads,
    MERGE_BLOCK pieces at a time with the running max rescaled as it grows. The loads bypass L1
    (".cg"): other programs wrote these pieces."""
    m = tl.full([GROUP_PAD], -1.0e30, dtype=tl.float32)
    total = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, BLOCK_D], dtype=tl.float32)
    head_ok = groups < GROUP
    for s0 in range(0, count, MERGE_BLOCK):
        s = s0 + tl.arange(0, MERGE_BLOCK)
        ok = s < count
        lse = tl.load(partial_lse_ptr + (first + s)[:, None] * stride_lp
                      + (first_head + groups)[None, :],
                      mask=ok[:, None] & head_ok[None, :], other=float("-inf"),
                      cache_modifier=".cg")  # [MERGE_BLOCK, GROUP_PAD]
        m_new = tl.maximum(m, tl.max(lse, axis=0))
        scale = tl.exp(m - m_new)
        w = tl.exp(lse - m_new[None, :])
        total = total * scale + tl.sum(w, axis=0)
        acc = acc * scale[:, None]
        for g in tl.static_range(GROUP):  # [MERGE_BLOCK, BLOCK_D] of one head at a time
            part = tl.load(partial_out_ptr + (first + s)[:, None] * stride_po
                           + (first_head + g) * stride_ph + dims[None, :],
                           mask=ok[:, None] & (dims[None, :] < HEAD_DIM), other=0.0,
                           cache_modifier=".cg")
            w_g = tl.sum(tl.where(groups[None, :] == g, w, 0.0), axis=1)  # [MERGE_BLOCK]
            row = tl.sum(part * w_g[:, None], axis=0)  # [BLOCK_D]
            acc += tl.where(groups[:, None] == g, row[None, :], 0.0)
        m = m_new
    out = acc / tl.maximum(total, 1.0e-30)[:, None]
    tl.store(out_rows, out.to(out_rows.dtype.element_ty), mask=q_mask)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     page_table: torch.Tensor, table_idx: torch.Tensor, kv_lens: torch.Tensor,
                     *, num_splits: int | None = None, workspace: DecodeWorkspace | None = None,
                     out: torch.Tensor | None = None, sm_scale: float | None = None,
                     config: DecodeConfig | None = None) -> torch.Tensor:
    """Attention of one new token per request over its whole paged sequence.

    q: [B, H, D]; k_cache, v_cache: [slots, H_kv, D] (this step's K/V already stored);
    page_table: [rows, max_seq_len] int32; table_idx, kv_lens: [B] int32 on the device.
    num_splits: pieces per request on average (the batch's keys are cut into about
    B * num_splits equal pieces). Returns out [B, H, D] (written into `out` when given). Pass a
    preallocated `workspace` and a fixed `num_splits` to launch without allocating, e.g. inside
    a CUDA graph. `config` (tiling) defaults to DECODE_CONFIGS' row for this batch size."""
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    cfg = config or decode_config(batch)
    if num_splits is None:
        num_splits = choose_num_splits(batch, num_kv_heads, page_table.shape[1], q.device, cfg)
    if workspace is None:
        workspace = DecodeWorkspace.allocate(batch, num_heads, head_dim, q.device, num_splits)
    pieces = batch * (num_splits + 1)  # the most pieces a cut can make
    if pieces > workspace.partial_lse.shape[0] or batch > workspace.max_batch:
        raise ValueError(f"workspace holds {workspace.partial_lse.shape[0]} pieces of "
                         f"{workspace.max_batch} requests; asked {batch} requests x "
                         f"{num_splits} splits ({pieces} pieces)")
    out, sm_scale = output_and_scale(q, k_cache, v_cache, out, sm_scale)
    partial_out, partial_lse = workspace.partial_out, workspace.partial_lse
    # num_splits and the batch size are runtime arguments, not constexprs: every new constexpr
    # value would compile another kernel in the middle of serving. BATCH_PAD (a power of two, at
    # least 16) is the one that follows the batch: five variants up to batch 256.
    _decode_piece_kernel[(pieces, num_kv_heads)](
        q, k_cache, v_cache, page_table, table_idx, kv_lens,
        partial_out, partial_lse, workspace.arrivals, out,
        sm_scale,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1),
        v_cache.stride(0), v_cache.stride(1),
        page_table.stride(0),
        partial_out.stride(0), partial_out.stride(1),
        partial_lse.stride(0),
        workspace.arrivals.stride(0),
        out.stride(0), out.stride(1),
        batch, num_splits,
        GROUP=group, GROUP_PAD=max(MIN_DOT_ROWS, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, BLOCK_D=triton.next_power_of_2(head_dim), BLOCK_N=cfg.block_n,
        BATCH_PAD=max(16, triton.next_power_of_2(batch)), MERGE_BLOCK=16,
        DOT_PRECISION=dot_precision(q.dtype),
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )
    return out
