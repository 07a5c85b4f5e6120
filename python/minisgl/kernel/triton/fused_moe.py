"""Fused Mixture-of-Experts in a fixed number of Triton launches (chapter 18).

    route    [T] programs      softmax over the experts, top-k, renormalise
    count    [E] programs      pairs per expert
    align    [E + 1] programs  pairs sorted by expert into blocks of BLOCK_M (moe/align.py's layout)
    gate_up  [blocks, I / BN]  one grouped GEMM: x rows of a block times its expert's gate and up
                               rows, silu(gate) * up written per pair
    down     [blocks, H / BN]  one grouped GEMM: that times the expert's down weights, scaled by
                               the pair's routing weight
    then a sum over each token's k pairs.

No launch depends on where the tokens went: the grids are sized for the worst case from T, k, E
and BLOCK_M alone, and blocks past the used ones return at once. So there is no host sync and a
CUDA graph can record the whole layer. Counting and sorting use no atomics: program e scans every
pair and keeps those of expert e in order, so the result is deterministic and equals the torch
reference's layout row for row.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from minisgl.moe.align import AlignedPairs, max_padded_rows

from .common import MIN_DOT_ROWS, dot_precision

SCAN_BLOCK = 256  # pairs one program looks at per step of its scan


def _scratch(*shape: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Buffers the kernels fill (tests swap in NaN-filled ones to catch rows left unwritten)."""
    return torch.empty(*shape, dtype=dtype, device=device)


@dataclass(frozen=True)
class MoETiles:
    """Tile sizes of the two grouped GEMMs."""

    block_m: int
    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3


def choose_tiles(num_pairs: int, num_experts: int, dtype: torch.dtype) -> MoETiles:
    """Small tiles when each expert sees few rows (decode), larger ones for prefill.

    A decode step of 64 tokens with k = 8 spreads 512 pairs over 128 experts, 4 rows each: a
    64-row tile would be 94% padding. The weights dominate the bytes read then, so the tile only
    has to be as tall as tl.dot allows (16) and narrow enough to give every SM work. fp32 tiles
    take half the K depth so that the pipelined copies still fit in shared memory.
    """
    deep = 128 if dtype.itemsize <= 2 else 64
    if num_pairs <= 8 * num_experts:
        return MoETiles(block_m=MIN_DOT_ROWS, block_n=64, block_k=deep, num_warps=4, num_stages=3)
    return MoETiles(block_m=64, block_n=128, block_k=deep // 2, num_warps=8, num_stages=3)


@triton.jit
def _route_kernel(logits_ptr, weights_ptr, ids_ptr, num_experts, stride_l,
                  TOP_K: tl.constexpr, NORMALIZE: tl.constexpr, BLOCK_E: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    """One token: softmax over its expert scores in fp32, the k largest (largest first)."""
    t = tl.program_id(0)
    experts = tl.arange(0, BLOCK_E)
    logits = tl.load(logits_ptr + t * stride_l + experts, mask=experts < num_experts,
                     other=-float("inf")).to(tl.float32)
    probs = tl.exp(logits - tl.max(logits, axis=0))
    probs = probs / tl.sum(probs, axis=0)
    slots = tl.arange(0, BLOCK_K)
    top_w = tl.zeros([BLOCK_K], dtype=tl.float32)
    top_i = tl.zeros([BLOCK_K], dtype=tl.int32)
    for j in tl.static_range(TOP_K):
        best = tl.max(probs, axis=0)
        # the lowest index among equal maxima, so the choice never depends on thread order
        index = tl.min(tl.where(probs == best, experts, BLOCK_E), axis=0)
        top_w = tl.where(slots == j, best, top_w)
        top_i = tl.where(slots == j, index, top_i)
        probs = tl.where(experts == index, -1.0, probs)  # taken: below every probability
    if NORMALIZE:
        top_w = top_w / tl.sum(top_w, axis=0)
    tl.store(weights_ptr + t * TOP_K + slots, top_w, mask=slots < TOP_K)
    tl.store(ids_ptr + t * TOP_K + slots, top_i, mask=slots < TOP_K)


@triton.jit
def _count_kernel(ids_ptr, counts_ptr, num_pairs, SCAN: tl.constexpr):
    """Program e: how many pairs chose expert e."""
    e = tl.program_id(0)
    total = 0
    for base in range(0, num_pairs, SCAN):
        offs = base + tl.arange(0, SCAN)
        ids = tl.load(ids_ptr + offs, mask=offs < num_pairs, other=-1)
        total += tl.sum((ids == e).to(tl.int32), axis=0)
    tl.store(counts_ptr + e, total)


@triton.jit
def _align_kernel(ids_ptr, counts_ptr, sorted_ptr, block_expert_ptr, num_pairs, num_experts,
                  max_blocks, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr, SCAN: tl.constexpr):
    """Program e < E: expert e's rows of the sorted buffer, padding included, and its blocks'
    expert ids. Program E: marks the blocks after the last expert's as unused (-1)."""
    e = tl.program_id(0)
    experts = tl.arange(0, BLOCK_E)
    counts = tl.load(counts_ptr + experts, mask=experts < num_experts, other=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    # first row of expert e: the padded rows of every expert before it
    start = tl.sum(tl.where(experts < e, padded, 0), axis=0)
    if e == num_experts:
        for b in range(start // BLOCK_M, max_blocks):
            tl.store(block_expert_ptr + b, -1)
    else:
        count = tl.sum(tl.where(experts == e, counts, 0), axis=0)
        written = 0
        for base in range(0, num_pairs, SCAN):
            offs = base + tl.arange(0, SCAN)
            mine = tl.load(ids_ptr + offs, mask=offs < num_pairs, other=-1) == e
            rank = tl.cumsum(mine.to(tl.int32), axis=0) - 1  # order kept within the expert
            tl.store(sorted_ptr + start + written + rank, offs, mask=mine)
            written += tl.sum(mine.to(tl.int32), axis=0)
        end = (count + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        pad = count + tl.arange(0, BLOCK_M)  # fewer than BLOCK_M rows of padding
        tl.store(sorted_ptr + start + pad, num_pairs, mask=pad < end)  # the sentinel
        for b in range(start // BLOCK_M, (start + end) // BLOCK_M):
            tl.store(block_expert_ptr + b, e)


@triton.jit
def _expert_gemm_kernel(a_ptr, w_ptr, out_ptr, sorted_ptr, block_expert_ptr, topk_weights_ptr,
                        N, K, num_pairs, top_k, stride_a, stride_we, stride_wn, stride_o,
                        GATED: tl.constexpr, A_ROW_IS_TOKEN: tl.constexpr,
                        MUL_WEIGHT: tl.constexpr, DOT_PRECISION: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """One BLOCK_M x BLOCK_N tile of out[pair] = a[row] @ w[expert][n, :]^T for the pairs of one
    block, all of one expert. GATED: w holds gate rows [0, N) then up rows [N, 2N), and the tile
    is silu(gate) * up. A_ROW_IS_TOKEN: a is indexed by token (pair // k), else by pair."""
    block = tl.program_id(0)
    expert = tl.load(block_expert_ptr + block)
    if expert < 0:
        return  # past the used blocks: the grid is sized for the worst case
    rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
    pairs = tl.load(sorted_ptr + rows)
    valid = pairs < num_pairs  # padding rows hold the sentinel num_pairs
    if A_ROW_IS_TOKEN:
        a_rows = (pairs // top_k).to(tl.int64)
    else:
        a_rows = pairs.to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w_base = w_ptr + expert.to(tl.int64) * stride_we
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a = tl.load(a_ptr + a_rows[:, None] * stride_a + ks[None, :],
                    mask=valid[:, None] & k_ok[None, :], other=0.0)
        w_mask = k_ok[:, None] & col_ok[None, :]
        w = tl.load(w_base + cols[None, :] * stride_wn + ks[:, None], mask=w_mask, other=0.0)
        acc = tl.dot(a, w, acc, input_precision=DOT_PRECISION)
        if GATED:
            w_up = tl.load(w_base + (cols[None, :] + N) * stride_wn + ks[:, None], mask=w_mask,
                           other=0.0)
            acc_up = tl.dot(a, w_up, acc_up, input_precision=DOT_PRECISION)
    if GATED:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up  # silu(gate) * up
    if MUL_WEIGHT:
        acc = acc * tl.load(topk_weights_ptr + pairs, mask=valid, other=0.0)[:, None]
    out = out_ptr + pairs.to(tl.int64)[:, None] * stride_o + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=valid[:, None] & col_ok[None, :])


def route_triton(router_logits: torch.Tensor, top_k: int, normalize: bool
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """moe.routing.route in one launch: topk_weights [T, k] fp32, topk_ids [T, k] int32."""
    tokens, num_experts = router_logits.shape
    assert router_logits.stride(1) == 1
    weights = _scratch(tokens, top_k, dtype=torch.float32, device=router_logits.device)
    ids = _scratch(tokens, top_k, dtype=torch.int32, device=router_logits.device)
    if tokens:
        _route_kernel[(tokens,)](router_logits, weights, ids, num_experts,
                                 router_logits.stride(0), TOP_K=top_k, NORMALIZE=normalize,
                                 BLOCK_E=triton.next_power_of_2(num_experts),
                                 BLOCK_K=triton.next_power_of_2(top_k))
    return weights, ids


def align_triton(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedPairs:
    """moe.align.align_pairs in two launches, the same buffers row for row."""
    ids = topk_ids.flatten().to(torch.int32)
    num_pairs = ids.numel()
    rows = max_padded_rows(num_pairs, num_experts, block_m)
    counts = _scratch(num_experts, dtype=torch.int32, device=ids.device)
    sorted_pairs = _scratch(rows, dtype=torch.int32, device=ids.device)
    block_expert = _scratch(rows // block_m, dtype=torch.int32, device=ids.device)
    _count_kernel[(num_experts,)](ids, counts, num_pairs, SCAN=SCAN_BLOCK)
    _align_kernel[(num_experts + 1,)](ids, counts, sorted_pairs, block_expert, num_pairs,
                                      num_experts, rows // block_m, BLOCK_M=block_m,
                                      BLOCK_E=triton.next_power_of_2(num_experts + 1),
                                      SCAN=SCAN_BLOCK)
    return AlignedPairs(sorted_pairs, block_expert)


def experts_triton(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                   topk_weights: torch.Tensor, topk_ids: torch.Tensor,
                   tiles: MoETiles | None = None) -> torch.Tensor:
    """moe.torch_ref.experts_torch as two grouped GEMMs; the same arguments and result."""
    tokens, hidden = x.shape
    num_experts, two_inter, _ = w13.shape
    inter, top_k = two_inter // 2, topk_ids.shape[1]
    num_pairs = tokens * top_k
    assert w13.shape[2] == hidden and w2.shape == (num_experts, hidden, inter)
    assert x.stride(1) == 1 and w13.stride(2) == 1 and w2.stride(2) == 1
    if num_pairs == 0:
        return torch.empty_like(x)
    tiles = tiles or choose_tiles(num_pairs, num_experts, x.dtype)
    aligned = align_triton(topk_ids, num_experts, tiles.block_m)
    weights = topk_weights.float().contiguous()
    num_blocks = aligned.block_expert.shape[0]
    precision = dot_precision(x.dtype)
    common = dict(DOT_PRECISION=precision, BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n,
                  BLOCK_K=tiles.block_k, num_warps=tiles.num_warps, num_stages=tiles.num_stages)
    hidden_act = _scratch(num_pairs, inter, dtype=x.dtype, device=x.device)
    _expert_gemm_kernel[(num_blocks, triton.cdiv(inter, tiles.block_n))](
        x, w13, hidden_act, aligned.sorted_pairs, aligned.block_expert, weights,
        inter, hidden, num_pairs, top_k, x.stride(0), w13.stride(0), w13.stride(1),
        hidden_act.stride(0), GATED=True, A_ROW_IS_TOKEN=True, MUL_WEIGHT=False, **common)
    per_pair = _scratch(num_pairs, hidden, dtype=x.dtype, device=x.device)
    _expert_gemm_kernel[(num_blocks, triton.cdiv(hidden, tiles.block_n))](
        hidden_act, w2, per_pair, aligned.sorted_pairs, aligned.block_expert, weights,
        hidden, inter, num_pairs, top_k, hidden_act.stride(0), w2.stride(0), w2.stride(1),
        per_pair.stride(0), GATED=False, A_ROW_IS_TOKEN=False, MUL_WEIGHT=True, **common)
    # each token's k weighted expert outputs; torch sums bf16 in fp32 internally
    return per_pair.view(tokens, top_k, hidden).sum(dim=1)
