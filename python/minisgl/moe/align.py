"""Sorting the (token, expert) pairs by expert into blocks of BLOCK_M rows (the torch version).

A grouped GEMM runs one tile of BLOCK_M rows against one expert's weights. So the T * k pairs are
sorted by expert, and each expert's run is padded to a multiple of BLOCK_M: then no block mixes two
experts, and block b only needs to know its expert, `block_expert[b]`. Padding rows hold the
sentinel T * k (one past the last pair) and are skipped; blocks past the end have expert -1.

The buffers are sized for the worst case, every expert that has pairs wasting BLOCK_M - 1 rows, so
their shapes depend only on T, k, E and BLOCK_M, never on where the tokens went: what a CUDA graph
needs (it records fixed shapes and launch grids). Pair p is token p // k, its (p % k)-th choice.
kernel/triton/fused_moe.py computes the same buffers on the GPU; this version is the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AlignedPairs:
    sorted_pairs: torch.Tensor  # [max_rows] int32: pair ids grouped by expert, sentinel = padding
    block_expert: torch.Tensor  # [max_rows // BLOCK_M] int32: each block's expert, -1 if unused


def max_padded_rows(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Rows the sorted buffer needs in the worst case, a multiple of block_m.

    At most min(E, num_pairs) experts get a pair, and each wastes at most block_m - 1 rows."""
    worst = num_pairs + min(num_experts, num_pairs) * (block_m - 1)
    return -(-worst // block_m) * block_m


def align_pairs(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> AlignedPairs:
    """Group the pairs of topk_ids [T, k] by expert, each group padded to a multiple of block_m;
    within a group the pairs keep their order."""
    ids = topk_ids.flatten().long()
    num_pairs = ids.numel()
    rows = max_padded_rows(num_pairs, num_experts, block_m)
    counts = torch.zeros(num_experts, dtype=torch.long, device=ids.device)
    counts.scatter_add_(0, ids, torch.ones_like(ids))
    padded = (counts + block_m - 1) // block_m * block_m
    start = torch.cumsum(padded, 0) - padded  # each expert's first row
    order = torch.sort(ids, stable=True).indices  # pairs by expert, in order within an expert
    first_of_expert = torch.cumsum(counts, 0) - counts  # where each expert begins in `order`
    rank = torch.arange(num_pairs, device=ids.device) - first_of_expert[ids[order]]
    sorted_pairs = torch.full((rows,), num_pairs, dtype=torch.int32, device=ids.device)
    sorted_pairs[start[ids[order]] + rank] = order.to(torch.int32)
    block_start = torch.arange(0, rows, block_m, device=ids.device)
    ends = torch.cumsum(padded, 0)
    expert = torch.searchsorted(ends, block_start, right=True)  # first expert ending after it
    block_expert = torch.where(expert < num_experts, expert, -1).to(torch.int32)
    return AlignedPairs(sorted_pairs, block_expert)
