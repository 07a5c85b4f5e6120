"""Sampling a batch in one launch: temperature, softmax, the random number and the inverse-CDF
draw (ops.sample; the torch reference is ops/sampling.py: sample_torch).

The torch version is about twenty small kernels per step (the hash of the random numbers alone
is a dozen integer ops), and three of them are full passes over [batch, vocab] fp32 tensors: the
division by the temperature, the softmax and the cumulative sum, each writing a new tensor that
the next one reads. At batch 256 and Qwen3's 151,936 tokens that is 155 MB per pass, and the
H200 profile of the official workload spent about 0.6 ms of a 7 ms decode step there.

Here one program owns one row and reads it at most three times, writing nothing but the token:

1. the maximum (and the argmax, the greedy token and the fallback) and the sum of
   exp((x - max) / T), with the running sum rescaled whenever the maximum grows (the online
   softmax of the attention kernels);
2. the random number u from (seed, position), the same integer hash as the reference;
3. a walk over the row accumulating exp((x - max) / T) until it exceeds u * sum: the first token
   where it does is the draw. The walk stops there, so on average it reads half the row.

The sums run in another order than torch's softmax and cumsum, so a draw that falls within
rounding distance (~1e-6) of a boundary between two tokens can pick the neighbour; the draw is
still exact for the kernel's own sums, and the same inputs always give the same token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048  # vocabulary entries per iteration of a program
LOG2E = 1.4426950408889634


@triton.jit
def _mix32(x):
    """ops/sampling.py: _mix32, on int64 values in [0, 2**32)."""
    mask = tl.full((), 0xFFFFFFFF, tl.int64)  # an int64 constant: a bare literal is uint32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & mask
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & mask
    return x ^ (x >> 16)


@triton.jit
def _sample_kernel(logits_ptr, stride_row, temperature_ptr, seed_ptr, position_ptr, out_ptr,
                   vocab, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    base = logits_ptr + row * stride_row
    temperature = tl.load(temperature_ptr + row)
    hot = temperature > 0
    # exp((x - m) / T) = exp2((x - m) * scale); a greedy row computes its sums as if T were 1
    # and never uses them
    scale = 1.4426950408889634 / tl.where(hot, temperature, 1.0)
    cols = tl.arange(0, BLOCK)

    # Pass 1: max, argmax (first index of the max, like torch.argmax) and the scaled sum.
    best = -float("inf")
    best_at = 0
    total = 0.0
    for start in range(0, vocab, BLOCK):
        offs = start + cols
        x = tl.load(base + offs, mask=offs < vocab, other=-float("inf")).to(tl.float32)
        block_max = tl.max(x, axis=0)
        block_at = tl.min(tl.where(x == block_max, offs, vocab), axis=0)
        new_best = tl.maximum(best, block_max)
        # Rescale the sum so far to the new maximum. While a row has seen only -inf (masked
        # tokens), the maximum stands in as 0: -inf minus -inf would be nan.
        shift = tl.where(best > -float("inf"), best - new_best, 0.0)
        ref = tl.where(new_best > -float("inf"), new_best, 0.0)
        total = total * tl.exp2(shift * scale) + tl.sum(tl.exp2((x - ref) * scale), axis=0)
        best_at = tl.where(block_max > best, block_at, best_at)
        best = new_best

    token = best_at
    if hot:
        # Pass 2: the uniform number of (seed, position), as ops/sampling.py: uniform_from.
        mask = tl.full((), 0xFFFFFFFF, tl.int64)
        seed = tl.load(seed_ptr + row).to(tl.int64) & mask
        position = tl.load(position_ptr + row).to(tl.int64) & mask
        h = _mix32(_mix32(seed) ^ position)
        h = _mix32(h ^ tl.full((), 0x9E3779B9, tl.int64))
        u = (h >> 8).to(tl.float32) * (1.0 / 16777216.0)
        target = u * total
        # Pass 3: the first token whose running sum exceeds the target.
        running = 0.0
        found = vocab
        start = 0
        while (start < vocab) & (found == vocab):
            offs = start + cols
            x = tl.load(base + offs, mask=offs < vocab, other=-float("inf")).to(tl.float32)
            p = tl.exp2((x - tl.where(best > -float("inf"), best, 0.0)) * scale)
            cdf = running + tl.cumsum(p, axis=0)
            found = tl.min(tl.where((cdf > target) & (p > 0), offs, vocab), axis=0)
            running += tl.sum(p, axis=0)
            start += BLOCK
        # Rounding can leave the target past the last running sum: the argmax then.
        token = tl.where(found < vocab, found, best_at)
    tl.store(out_ptr + row, token.to(tl.int64))


def sample(logits: torch.Tensor, temperature: torch.Tensor, seed32: torch.Tensor,
           positions: torch.Tensor) -> torch.Tensor:
    """ops.sample on a GPU: tokens [B] int64 from logits [B, V] (rows with a contiguous last
    axis, any float dtype), temperature [B] fp32 (0: greedy), seed32 and positions [B] int64."""
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    for name, t in (("temperature", temperature), ("seed32", seed32), ("positions", positions)):
        if t.shape != (rows,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({rows},)")
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows:
        _sample_kernel[(rows,)](logits, logits.stride(0), temperature.float().contiguous(),
                                seed32.contiguous(), positions.contiguous(), out, vocab,
                                BLOCK=BLOCK, num_warps=8)
    return out
