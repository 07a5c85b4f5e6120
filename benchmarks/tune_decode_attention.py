"""Sweep the tiling of chapter 20's paged decode kernel on a GPU, beside PyTorch's SDPA.

    python benchmarks/tune_decode_attention.py            # on a GPU: Qwen3-0.6B heads, bf16
    python benchmarks/tune_decode_attention.py --smoke    # tiny shapes, any machine (CPU: interpreter)

For each shape (batch x context: 1 x 8192, 4 x 8192, 16 x 4096, 256 x 1024; page size 16 over
shuffled pages) every DecodeConfig of a small grid (block_n, num_warps, num_stages and, where the
batch is small enough to split, programs_per_sm, which sets the split count) is first checked
against SDPA (`enable_gqa=True` on a dense cache of the same K/V) and then timed. Both sides are
timed the same way, by `time_us` of benchmarks/triton_attention.py: the calls of one measurement
are captured in one CUDA graph and replayed between CUDA events (median of the replays), cycling
through enough K/V copies that every call reads HBM, not L2.

Prints one table per shape, the best config per shape with its time against SDPA, whether the
chapter's targets hold (1 x 8192 faster than SDPA; 256 x 1024 at least 75% of SDPA's bandwidth),
and the DECODE_CONFIGS table of minisgl/kernel/triton/decode_attention.py that the winners make:
paste it there. Exits 1 if any config computed a wrong result.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from triton_attention import QWEN3_0_6B, SMOKE, Shape, paged_copy, shuffled_page_table, time_us

from minisgl.kernel.triton import (
    DecodeConfig,
    DecodeWorkspace,
    choose_num_splits,
    decode_attention,
)

WORKING_SET = 512 << 20  # bytes of K/V cycled through per timing: ten times the H200's L2
TOLERANCE = 2e-2  # bf16 outputs of the two sides


@dataclass
class Result:
    config: DecodeConfig
    splits: int
    us: float
    error: float


def configs(grid: dict[str, list], may_split: bool) -> list[DecodeConfig]:
    """Every combination of the grid; programs_per_sm only matters when the batch may split."""
    per_sm = grid["programs_per_sm"] if may_split else [1.0]
    return [DecodeConfig(block_n=b, num_warps=w, num_stages=s, programs_per_sm=p, max_splits=64)
            for b, w, s, p in itertools.product(grid["block_n"], grid["num_warps"],
                                                grid["num_stages"], per_sm)]


def sweep_shape(batch: int, context: int, shape: Shape, grid: dict[str, list], device: str,
                iters: int) -> tuple[list[Result], float, int]:
    """All configs at one shape; returns the results, SDPA's time and the K/V bytes."""
    page_table = shuffled_page_table(batch, context, shape.page_size, device)
    kv_bytes = 2 * batch * context * shape.num_kv_heads * shape.head_dim * shape.dtype.itemsize
    num_copies = math.ceil(WORKING_SET / kv_bytes) if device == "cuda" else 1
    copies = [paged_copy(batch, context, shape, page_table, device) for _ in range(num_copies)]
    q = torch.randn(batch, shape.num_qo_heads, shape.head_dim, device=device, dtype=shape.dtype)
    table_idx = torch.arange(batch, device=device, dtype=torch.int32)
    kv_lens = torch.full((batch,), context, device=device, dtype=torch.int32)
    workspace = DecodeWorkspace.allocate(batch, shape.num_qo_heads, shape.head_dim, device,
                                         max_splits=64)
    out_sdpa = torch.empty_like(q)

    def sdpa(c):
        return lambda: out_sdpa.copy_(F.scaled_dot_product_attention(
            q[:, :, None], c.dense_k, c.dense_v, enable_gqa=True)[:, :, 0])

    sdpa(copies[0])()
    expected = out_sdpa.clone()
    t_sdpa = time_us([sdpa(c) for c in copies], iters)
    may_split = choose_num_splits(batch, shape.num_kv_heads, context, q.device,
                                  DecodeConfig(programs_per_sm=4, max_splits=64)) > 1
    results = []
    for cfg in configs(grid, may_split):
        splits = choose_num_splits(batch, shape.num_kv_heads, context, q.device, cfg)
        out = torch.full_like(q, float("nan"))

        def call(c, cfg=cfg, splits=splits, out=out):
            return lambda: decode_attention(q, c.k_cache, c.v_cache, page_table, table_idx,
                                            kv_lens, num_splits=splits, workspace=workspace,
                                            out=out, config=cfg)

        call(copies[0])()
        error = (out.float() - expected.float()).abs().max().item()  # NaN if a row is unwritten
        if not error <= TOLERANCE:
            results.append(Result(cfg, splits, float("nan"), error))
            continue
        results.append(Result(cfg, splits, time_us([call(c) for c in copies], iters), error))
    return results, t_sdpa, kv_bytes


def config_source(cfg: DecodeConfig) -> str:
    return (f"DecodeConfig(block_n={cfg.block_n}, num_warps={cfg.num_warps}, "
            f"num_stages={cfg.num_stages}, programs_per_sm={cfg.programs_per_sm}, "
            f"max_splits={cfg.max_splits})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes and grid that also run on a CPU under the interpreter")
    parser.add_argument("--iters", type=int, default=20, help="graph replays per timing")
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and not args.smoke:
        print("no CUDA device: run with --smoke to check the code paths under the interpreter")
        return 1
    torch.manual_seed(0)
    if args.smoke:
        shape, iters = SMOKE, 2
        cases = [(1, 200), (3, 70)]
        grid = {"block_n": [16, 32], "num_warps": [4], "num_stages": [2],
                "programs_per_sm": [2.0]}
    else:
        shape, iters = QWEN3_0_6B, args.iters
        cases = [(1, 8192), (4, 8192), (16, 4096), (256, 1024)]
        grid = {"block_n": [32, 64, 128], "num_warps": [2, 4, 8], "num_stages": [1, 2, 3],
                "programs_per_sm": [1.0, 2.0, 4.0]}
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; Qwen3-0.6B heads "
              f"(16 q, 8 kv, head_dim 128), bf16, page size 16; both sides timed as CUDA-graph "
              f"replays between CUDA events, median of {iters}")
    print(f"grid: {grid}")
    wrong = 0
    best: dict[int, Result] = {}
    verdicts = []
    for batch, context in cases:
        results, t_sdpa, kv_bytes = sweep_shape(batch, context, shape, grid, device, iters)
        print(f"\n== decode batch {batch} x {context} tokens: sdpa {t_sdpa:8.1f} us "
              f"{kv_bytes / t_sdpa / 1e6:5.2f} TB/s")
        print(" block_n warps stages prog/SM splits |  triton us   TB/s | sdpa/triton | max diff")
        for r in sorted(results, key=lambda r: (math.isnan(r.us), r.us)):
            c = r.config
            if math.isnan(r.us):
                wrong += 1
                print(f" {c.block_n:7d} {c.num_warps:5d} {c.num_stages:6d} "
                      f"{c.programs_per_sm:7.1f} {r.splits:6d} | WRONG: max |diff| {r.error:.2e}")
                continue
            print(f" {c.block_n:7d} {c.num_warps:5d} {c.num_stages:6d} {c.programs_per_sm:7.1f} "
                  f"{r.splits:6d} | {r.us:9.1f} {kv_bytes / r.us / 1e6:6.2f} | "
                  f"{t_sdpa / r.us:11.2f} | {r.error:.1e}")
        ok = [r for r in results if not math.isnan(r.us)]
        if not ok:
            continue
        top = min(ok, key=lambda r: r.us)
        best[batch] = top
        ratio = t_sdpa / top.us
        print(f"best at {batch} x {context}: {config_source(top.config)}, {top.splits} splits: "
              f"{top.us:.1f} us, sdpa/triton time {ratio:.2f}")
        if (batch, context) == (1, 8192):
            verdicts.append(f"target 1 x 8192 faster than SDPA: "
                            f"{'met' if ratio > 1 else 'NOT met'} ({ratio:.2f}x)")
        if (batch, context) == (256, 1024):
            verdicts.append(f"target 256 x 1024 >= 75% of SDPA's bandwidth: "
                            f"{'met' if ratio >= 0.75 else 'NOT met'} ({ratio:.2f})")
    print()
    for line in verdicts:
        print(line)
    if best:
        batches = sorted(best)
        print("DECODE_CONFIGS for python/minisgl/kernel/triton/decode_attention.py:")
        print("DECODE_CONFIGS: list[tuple[int, DecodeConfig]] = [")
        for i, b in enumerate(batches):
            bound = "1 << 31" if i == len(batches) - 1 else str(b)
            print(f"    ({bound}, {config_source(best[b].config)}),")
        print("]")
    if wrong:
        print(f"{wrong} config(s) gave WRONG results")
        return 1
    print("all configs checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
