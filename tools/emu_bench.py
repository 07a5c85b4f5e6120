#!/usr/bin/env python3
"""Times the CUDA emulator: 64 blocks x 256 threads, each passing __syncthreads() 10 times.

    python tools/emu_bench.py

Builds tools/emu/bench_barrier.cu with tools/emu_kernels.py (the compile is cached and not
timed) and prints the seconds the launch took, as measured inside the program, plus the wall
time of the whole run. The target is well under 2 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import emu_kernels  # noqa: E402

BENCH = Path(__file__).resolve().parent / "emu" / "bench_barrier.cu"


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    ).parse_args(argv)  # no options: --help says what the run does
    binary, log = emu_kernels.build(BENCH, echo=True)
    if binary is None:
        print("emu bench: the benchmark does not compile", file=sys.stderr)
        return 1
    start = time.perf_counter()
    result = emu_kernels.execute(BENCH, echo=False)
    wall = time.perf_counter() - start
    if not result.ok:
        sys.stderr.write(result.stdout + result.stderr)
        print(f"emu bench: {result.reason}", file=sys.stderr)
        return 1
    match = re.search(r"([0-9.]+) s", result.stdout)
    kernel_s = float(match.group(1)) if match else float("nan")
    print(
        f"emu bench: 64 blocks x 256 threads x 10 __syncthreads: {kernel_s:.3f} s "
        f"(whole program {wall:.3f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
