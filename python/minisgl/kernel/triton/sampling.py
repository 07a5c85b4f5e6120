"""Sampling a batch in two small launches: temperature, softmax, the random number and the
inverse-CDF draw (ops.sample; the torch reference is ops/sampling.py: sample_torch).

The torch version is about twenty small kernels per step (the hash of the random numbers alone
is a dozen integer ops), and three of them are full passes over [batch, vocab] fp32 tensors: the
division by the temperature, the softmax and the cumulative sum, each writing a new tensor that
the next one reads. At batch 256 and Qwen3's 151,936 tokens that is 155 MB per pass, and the
H200 profile of the official workload spent about 0.6 ms of a 7 ms decode step there.

Here the row is cut into chunks of CHUNK tokens, and nothing but a few numbers per chunk and the
token is written:

1. program (row, chunk): the chunk's maximum, its argmax (the first index of the maximum, like
   torch.argmax) and its sum of exp((x - chunk max) / T), with the running sum rescaled whenever
   the maximum grows (the online softmax of the attention kernels);
2. program (row): the row's maximum and argmax (the greedy token) from the chunks' and its sum,
   each chunk's sum rescaled to the row's maximum; the random number u from (seed, position),
   the same integer hash as the reference; the chunk where the running sum of the chunks passes
   u * sum; then a walk over that chunk alone to the first token where it does.

So the row is read about once, by rows x chunks programs at a time (one program per row, walking
the row alone, kept a 256-row batch to ~2 programs per SM). The sums run in another order than
torch's softmax and cumsum, so a draw that falls within rounding distance (~1e-6) of a boundary
between two tokens can pick the neighbour; the draw is still exact for the kernel's own sums, and
the same inputs always give the same token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048  # vocabulary entries per iteration of a program
CHUNK = 4 * BLOCK  # vocabulary entries per stage-1 program: 19 chunks for Qwen3's vocabulary
LOG2E = tl.constexpr(1.4426950408889634)


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
def _chunk_kernel(logits_ptr, stride_row, temperature_ptr, chunk_max_ptr, chunk_at_ptr,
                  chunk_sum_ptr, vocab, num_chunks, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, chunk): max, first argmax and sum of exp2((x - max) * scale) of the chunk."""
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    base = logits_ptr + row * stride_row
    temperature = tl.load(temperature_ptr + row)
    # exp((x - m) / T) = exp2((x - m) * scale); a greedy row computes its sums as if T were 1
    # and never uses them
    scale = LOG2E / tl.where(temperature > 0, temperature, 1.0)
    cols = tl.arange(0, BLOCK)
    best = -float("inf")
    best_at = 0
    total = 0.0
    for start in range(chunk * CHUNK, tl.minimum(chunk * CHUNK + CHUNK, vocab), BLOCK):
        offs = start + cols
        x = tl.load(base + offs, mask=offs < vocab, other=-float("inf")).to(tl.float32)
        block_max = tl.max(x, axis=0)
        block_at = tl.min(tl.where(x == block_max, offs, vocab), axis=0)
        new_best = tl.maximum(best, block_max)
        # Rescale the sum so far to the new maximum. While the chunk has seen only -inf (masked
        # tokens), the maximum stands in as 0: -inf minus -inf would be nan.
        shift = tl.where(best > -float("inf"), best - new_best, 0.0)
        ref = tl.where(new_best > -float("inf"), new_best, 0.0)
        total = total * tl.exp2(shift * scale) + tl.sum(tl.exp2((x - ref) * scale), axis=0)
        best_at = tl.where(block_max > best, block_at, best_at)
        best = new_best
    out = row * num_chunks + chunk
    tl.store(chunk_max_ptr + out, best)
    tl.store(chunk_at_ptr + out, best_at)
    tl.store(chunk_sum_ptr + out, total)


@triton.jit
def _draw_kernel(logits_ptr, stride_row, temperature_ptr, seed_ptr, position_ptr,
                 chunk_max_ptr, chunk_at_ptr, chunk_sum_ptr, out_ptr, vocab, num_chunks,
                 CHUNK: tl.constexpr, CHUNKS_PAD: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row): the greedy token, or the inverse-CDF draw, from the chunks' numbers."""
    row = tl.program_id(0).to(tl.int64)
    temperature = tl.load(temperature_ptr + row)
    hot = temperature > 0
    scale = LOG2E / tl.where(hot, temperature, 1.0)
    chunks = tl.arange(0, CHUNKS_PAD)
    real = chunks < num_chunks
    maxes = tl.load(chunk_max_ptr + row * num_chunks + chunks, mask=real, other=-float("inf"))
    best = tl.max(maxes, axis=0)
    # the first chunk that holds the maximum holds its first index
    first = tl.min(tl.where(maxes == best, chunks, CHUNKS_PAD), axis=0)
    ats = tl.load(chunk_at_ptr + row * num_chunks + chunks, mask=real, other=0)
    best_at = tl.sum(tl.where(chunks == first, ats, 0), axis=0)
    token = best_at
    if hot:
        ref = tl.where(best > -float("inf"), best, 0.0)
        sums = tl.load(chunk_sum_ptr + row * num_chunks + chunks, mask=real, other=0.0)
        # each chunk's sum relative to the row's maximum (a chunk of only -inf adds nothing)
        sums = tl.where(maxes > -float("inf"), sums * tl.exp2((maxes - ref) * scale), 0.0)
        ends = tl.cumsum(sums, axis=0)
        # The uniform number of (seed, position), as ops/sampling.py: uniform_from.
        mask = tl.full((), 0xFFFFFFFF, tl.int64)
        seed = tl.load(seed_ptr + row).to(tl.int64) & mask
        position = tl.load(position_ptr + row).to(tl.int64) & mask
        h = _mix32(_mix32(seed) ^ position)
        h = _mix32(h ^ tl.full((), 0x9E3779B9, tl.int64))
        u = (h >> 8).to(tl.float32) * (1.0 / 16777216.0)
        target = u * tl.sum(sums, axis=0)
        # The chunk where the running sum passes the target; rounding can leave the target past
        # the last sum: the last chunk with any weight then.
        hit = tl.min(tl.where((ends > target) & (sums > 0), chunks, CHUNKS_PAD), axis=0)
        last = tl.max(tl.where(sums > 0, chunks, -1), axis=0)
        hit = tl.where(hit < CHUNKS_PAD, hit, last)
        running = tl.sum(tl.where(chunks == hit, ends - sums, 0.0), axis=0)  # before the chunk
        base = logits_ptr + row * stride_row
        cols = tl.arange(0, BLOCK)
        found = vocab
        start = hit * CHUNK
        stop = tl.minimum(start + CHUNK, vocab)
        while (start < stop) & (found == vocab):
            offs = start + cols
            x = tl.load(base + offs, mask=offs < stop, other=-float("inf")).to(tl.float32)
            p = tl.exp2((x - ref) * scale)
            cdf = running + tl.cumsum(p, axis=0)
            found = tl.min(tl.where((cdf > target) & (p > 0), offs, vocab), axis=0)
            running += tl.sum(p, axis=0)
            start += BLOCK
        # Rounding inside the chunk can leave the target past its last token: the argmax then.
        token = tl.where(found < vocab, found, best_at)
    tl.store(out_ptr + row, token.to(tl.int64))


def sample(logits: torch.Tensor, temperature: torch.Tensor, seed32: torch.Tensor,
           positions: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """ops.sample on a GPU: tokens [B] int64 from logits [B, V] (rows with a contiguous last
    axis, any float dtype), temperature [B] fp32 (0: greedy), seed32 and positions [B] int64.
    chunk: tokens per stage-1 program (a multiple of BLOCK)."""
    rows, vocab = logits.shape
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    for name, t in (("temperature", temperature), ("seed32", seed32), ("positions", positions)):
        if t.shape != (rows,):
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected ({rows},)")
    if chunk <= 0 or chunk % BLOCK:
        raise ValueError(f"chunk must be a positive multiple of {BLOCK}, got {chunk}")
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if not rows:
        return out
    temperature = temperature.float().contiguous()
    num_chunks = triton.cdiv(vocab, chunk)
    maxes = torch.empty(rows, num_chunks, dtype=torch.float32, device=logits.device)
    ats = torch.empty(rows, num_chunks, dtype=torch.int32, device=logits.device)
    sums = torch.empty(rows, num_chunks, dtype=torch.float32, device=logits.device)
    _chunk_kernel[(rows, num_chunks)](logits, logits.stride(0), temperature, maxes, ats, sums,
                                      vocab, num_chunks, CHUNK=chunk, BLOCK=BLOCK, num_warps=8)
    _draw_kernel[(rows,)](logits, logits.stride(0), temperature, seed32.contiguous(),
                          positions.contiguous(), maxes, ats, sums, out, vocab, num_chunks,
                          CHUNK=chunk, CHUNKS_PAD=max(2, triton.next_power_of_2(num_chunks)),
                          BLOCK=BLOCK, num_warps=8)
    return out
