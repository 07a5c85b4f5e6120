#!/usr/bin/env python3
"""Run unmodified CUDA C++ programs on the CPU, with every CUDA thread a coroutine.

    python tools/emu_kernels.py                    # every *.cu directly in tests/cuda/
    python tools/emu_kernels.py a.cu b.cu          # these programs
    python tools/emu_kernels.py --trace-dir DIR    # also a FlashInfer Trace set (emu_trace.py)

Each program is rewritten a little (kernel launches and __shared__ declarations become calls
into the runtime in tools/emu/), compiled with the machine's g++ against that runtime, and run.
Its stdout and stderr stream through unchanged; the emulator's own lines start with "emu:" and
go to stderr. The exit status is non-zero if any program fails to compile, exits non-zero, or
the emulator reports an error (out-of-bounds access, barrier divergence, deadlock, a warp
collective with a lane missing from its mask, ...). docs/appendix/emulator.md explains it all.

From Python: `run(path) -> bool`, or `execute(path, echo=False)` for the captured output.
The work is done by tools/emu_rewrite.py (the source rewrite) and tools/emu_runner.py (build
and run), whose names this module re-exports; this module adds the command line.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (the practice judge)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

# ruff: noqa: E402, F401  (the names below are this module's interface, re-exported)
from emu_rewrite import (
    Edit,
    RewriteError,
    apply_edits,
    blank_non_code,
    canonical_name,
    rewrite_source,
)
from emu_runner import (
    COMMON_FLAGS,
    CSRC_DIR,
    DEFAULT_TIMEOUT_S,
    PROGRAM_FLAGS,
    REPO_ROOT,
    RUNTIME_DIR,
    RUNTIME_FLAGS,
    RunResult,
    Stager,
    build,
    build_runtime,
    cache_root,
    compile_unit,
    compiler,
    compiler_id,
    cuda_version_flags,
    display,
    execute,
    execute_binary,
    link,
    run,
    runtime_digest,
)

DEFAULT_DIR = REPO_ROOT / "tests" / "cuda"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="CUDA programs (default: tests/cuda/*.cu)"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per program (default 600)"
    )
    parser.add_argument(
        "--trace-dir", type=Path, default=None,
        help="also write the chapter-19 kernels' FlashInfer Trace set there (tools/emu_trace.py; "
             "default: no trace set)",
    )
    args = parser.parse_args(argv)
    files = args.files or sorted(DEFAULT_DIR.glob("*.cu"))
    if not files:
        print(f"emu: no *.cu programs in {display(DEFAULT_DIR)}", file=sys.stderr)
        return 0
    results = [execute(f, timeout=args.timeout) for f in files]
    failed = [r for r in results if not r.ok]
    if len(results) > 1:
        if failed:
            names = ", ".join(display(r.path) for r in failed)
            print(f"emu: {len(failed)} of {len(results)} programs FAILED: {names}", file=sys.stderr)
        else:
            print(f"emu: all {len(results)} programs ok", file=sys.stderr)
    traced = True
    if args.trace_dir is not None:
        import emu_trace  # needs torch, safetensors and flashinfer-bench: only for this flag

        traced = emu_trace.write_trace_set(args.trace_dir, files)
    return 1 if failed or not traced else 0


if __name__ == "__main__":
    sys.exit(main())
