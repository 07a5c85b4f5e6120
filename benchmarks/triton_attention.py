"""Chapter 20's Triton paged attention against PyTorch's fused SDPA on a dense K/V cache.

    python benchmarks/triton_attention.py            # on a GPU: Qwen3-0.6B heads, bf16
    python benchmarks/triton_attention.py --smoke    # tiny shapes, any machine (CPU: interpreter)

Decode: one query token per request, every request `context` tokens long. The Triton kernel reads
K/V through a page table over a pool of shuffled pages; SDPA (`enable_gqa=True`) reads a dense
[batch, kv_heads, context, head_dim] cache of the same size. Each case is first checked (the two
outputs on the same data must agree), then timed: CUDA-graph replays of calls that cycle through
enough K/V copies that the working set is several times the 50 MB L2, so every call reads from
HBM; K/V read bandwidth = K and V bytes / time. Extend: a 64 x 512-token prefill, the Triton
kernel against SDPA with `is_causal=True`. Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minisgl.kernel.triton import (
    DecodeWorkspace,
    choose_num_splits,
    decode_attention,
    extend_attention,
)

WORKING_SET = 512 << 20  # bytes of K/V cycled through per timing: ten times the H200's L2
FAILED: list[str] = []


@dataclass
class Shape:
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype
    page_size: int


QWEN3_0_6B = Shape(16, 8, 128, torch.bfloat16, page_size=16)
# The interpreter keeps bf16 as raw 16-bit integers inside tl.dot, so the smoke run uses fp32.
SMOKE = Shape(4, 2, 16, torch.float32, page_size=4)


def check(name: str, got: torch.Tensor, expected: torch.Tensor, tol: float) -> None:
    err = (got.float() - expected.float()).abs().max().item()
    ok = err <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {name}: max |diff| {err:.2e} (tolerance {tol:.0e})")
    if not ok:
        FAILED.append(name)


def time_us(calls: list[Callable[[], object]], iters: int) -> float:
    """Median time of one call. On a GPU all calls are captured in one CUDA graph (launch cost
    gone, as in a decoding engine) and the graph is replayed `iters` times between CUDA events.
    On a CPU: wall time of one pass (the interpreter: a check of the code path, not a speed)."""
    if not torch.cuda.is_available():
        start = time.perf_counter()
        for fn in calls:
            fn()
        return (time.perf_counter() - start) * 1e6 / len(calls)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up (Triton compiles here) outside the capture
        for fn in calls:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in calls:
            fn()
    for _ in range(3):
        graph.replay()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / len(calls))
    return statistics.median(times)


@dataclass
class PagedCopy:
    """One copy of the K/V data, dense for SDPA and in a shuffled page pool for Triton."""

    dense_k: torch.Tensor  # [batch, kv_heads, context, head_dim]
    dense_v: torch.Tensor
    k_cache: torch.Tensor  # [slots, kv_heads, head_dim]
    v_cache: torch.Tensor


def paged_copy(batch: int, context: int, shape: Shape, page_table: torch.Tensor,
               device: str) -> PagedCopy:
    dense = [torch.randn(batch, shape.num_kv_heads, context, shape.head_dim, device=device,
                         dtype=shape.dtype) for _ in range(2)]
    slots = page_table[:, :context].long()  # request b uses page-table row b here
    pools = []
    for cache in dense:
        pool = torch.empty(int(slots.max()) + 1, shape.num_kv_heads, shape.head_dim,
                           device=device, dtype=shape.dtype)
        pool[slots.flatten()] = cache.transpose(1, 2).flatten(0, 1)
        pools.append(pool)
    return PagedCopy(dense[0], dense[1], pools[0], pools[1])


def shuffled_page_table(batch: int, context: int, page_size: int, device: str) -> torch.Tensor:
    pages = batch * math.ceil(context / page_size)
    order = torch.randperm(pages, device=device).view(batch, -1)
    slots = order[:, :, None] * page_size + torch.arange(page_size, device=device)
    return slots.flatten(1)[:, :context].int().contiguous()


def bench_decode(batch: int, context: int, shape: Shape, device: str, iters: int) -> None:
    page_table = shuffled_page_table(batch, context, shape.page_size, device)
    kv_bytes = 2 * batch * context * shape.num_kv_heads * shape.head_dim * shape.dtype.itemsize
    num_copies = math.ceil(WORKING_SET / kv_bytes) if device == "cuda" else 1
    copies = [paged_copy(batch, context, shape, page_table, device) for _ in range(num_copies)]
    q = torch.randn(batch, shape.num_qo_heads, shape.head_dim, device=device, dtype=shape.dtype)
    table_idx = torch.arange(batch, device=device, dtype=torch.int32)
    kv_lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    splits = choose_num_splits(batch, shape.num_kv_heads, page_table.shape[1], q.device)
    workspace = DecodeWorkspace.allocate(batch, shape.num_qo_heads, shape.head_dim, device)
    out_triton, out_sdpa = torch.empty_like(q), torch.empty_like(q)

    def triton_call(c: PagedCopy) -> Callable[[], object]:
        return lambda: decode_attention(q, c.k_cache, c.v_cache, page_table, table_idx, kv_lens,
                                        num_splits=splits, workspace=workspace, out=out_triton)

    def sdpa_call(c: PagedCopy) -> Callable[[], object]:
        return lambda: out_sdpa.copy_(F.scaled_dot_product_attention(
            q[:, :, None], c.dense_k, c.dense_v, enable_gqa=True)[:, :, 0])

    triton_call(copies[0])()
    sdpa_call(copies[0])()
    label = f"decode batch {batch:3d} x {context:5d} tokens, {splits:2d} splits"
    check(f"{label}: triton == sdpa", out_triton, out_sdpa, 2e-2)
    t_triton = time_us([triton_call(c) for c in copies], iters)
    t_sdpa = time_us([sdpa_call(c) for c in copies], iters)
    print(f"time {label}: triton {t_triton:8.1f} us {kv_bytes / t_triton / 1e6:5.2f} TB/s | "
          f"sdpa {t_sdpa:8.1f} us {kv_bytes / t_sdpa / 1e6:5.2f} TB/s | "
          f"sdpa/triton time {t_sdpa / t_triton:4.2f}")


def bench_extend(batch: int, length: int, shape: Shape, device: str, iters: int) -> None:
    """A prefill with nothing cached: every request's `length` new tokens attend causally."""
    page_table = shuffled_page_table(batch, length, shape.page_size, device)
    kv = paged_copy(batch, length, shape, page_table, device)
    q_dense = torch.randn(batch, shape.num_qo_heads, length, shape.head_dim, device=device,
                          dtype=shape.dtype)
    q = q_dense.transpose(1, 2).flatten(0, 1).contiguous()  # [tokens, heads, head_dim]
    table_idx = torch.arange(batch, device=device, dtype=torch.int32)
    kv_lens = torch.full((batch,), length, device=device, dtype=torch.int32)
    cu_q_lens = torch.arange(batch + 1, device=device, dtype=torch.int32) * length
    out_triton = torch.empty_like(q)

    def triton_fn() -> None:
        extend_attention(q, kv.k_cache, kv.v_cache, page_table, table_idx, cu_q_lens, kv_lens,
                         length, out=out_triton)

    def sdpa_fn() -> torch.Tensor:
        return F.scaled_dot_product_attention(q_dense, kv.dense_k, kv.dense_v, is_causal=True,
                                              enable_gqa=True)

    triton_fn()
    expected = sdpa_fn().transpose(1, 2).flatten(0, 1)
    label = f"extend batch {batch:3d} x {length:5d} new tokens"
    check(f"{label}: triton == sdpa causal", out_triton, expected, 2e-2)
    # causal: each query sees on average (length + 1) / 2 keys; 2 matmuls of 2 flops a term
    flops = 4 * batch * shape.num_qo_heads * shape.head_dim * length * (length + 1) / 2
    t_triton, t_sdpa = time_us([triton_fn], iters), time_us([sdpa_fn], iters)
    print(f"time {label}: triton {t_triton:8.1f} us {flops / t_triton / 1e6:6.1f} TFLOP/s | "
          f"sdpa {t_sdpa:8.1f} us {flops / t_sdpa / 1e6:6.1f} TFLOP/s | "
          f"sdpa/triton time {t_sdpa / t_triton:4.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes that also run on a CPU under Triton's interpreter")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        print("no CUDA device: run with --smoke to check the code paths under the interpreter")
        return 1
    torch.manual_seed(0)
    if args.smoke:
        shape, iters = SMOKE, 3
        decode_cases, extend_case = [(3, 70), (1, 200)], (2, 80)
    else:
        shape, iters = QWEN3_0_6B, 50
        decode_cases = [(256, 1024), (64, 2048), (16, 4096), (4, 8192), (1, 8192)]
        extend_case = (64, 512)
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    for batch, context in decode_cases:
        bench_decode(batch, context, shape, device, iters)
    bench_extend(*extend_case, shape, device, iters)
    if FAILED:
        print(f"{len(FAILED)} check(s) FAILED: {', '.join(FAILED)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
