"""python -m minisgl.trace bench DIR | report DIR [--plot FILE]   (chapter 22)."""

from __future__ import annotations

import argparse
import logging
import sys
import time

from flashinfer_bench.data import TraceSet


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minisgl.trace",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                description="Benchmark and report a FlashInfer Trace set "
                                            "captured with --trace-dir / LLM(trace_dir=...).")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="run every solution on every workload, write traces",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    b.add_argument("dir")
    b.add_argument("--device", default="auto", help="auto | cpu | cuda")
    b.add_argument("--warmup", type=int, default=2)
    b.add_argument("--iters", type=int, default=5)
    b.add_argument("--trials", type=int, default=3)
    b.add_argument("--solutions", default="", help="comma-separated suffixes (torch,triton,"
                                                   "cuda); empty: all")
    b.add_argument("--definitions", default="", help="comma-separated name prefixes; empty: all")
    b.add_argument("--max-workloads", type=int, default=0, help="per definition; 0: all")
    r = sub.add_parser("report", help="print the per-definition table, save a plot",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    r.add_argument("dir")
    r.add_argument("--plot", default="", help="PNG path (default: DIR/report.png)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.command == "bench":
        from .bench import BenchConfig, bench

        split = lambda s: tuple(x for x in s.split(",") if x)  # noqa: E731
        start = time.perf_counter()
        results = bench(args.dir, BenchConfig(args.device, args.warmup, args.iters, args.trials,
                                              split(args.solutions), split(args.definitions),
                                              args.max_workloads))
        n = sum(len(t) for t in results.values())
        print(f"bench: {n} traces of {len(results)} definitions in "
              f"{time.perf_counter() - start:.1f} s -> {args.dir}/traces")
        return 0
    from .report import plot, rows, table

    found = rows(TraceSet.from_path(args.dir))
    if not found:
        print(f"{args.dir} holds no traces: run `python -m minisgl.trace bench {args.dir}`")
        return 1
    print(table(found))
    path = plot(found, args.plot or f"{args.dir}/report.png")
    print(f"plot: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
