"""Chapter 22: benchmark every solution on the captured workloads, then apply the best.

1. Capture: SmolLM2 answers 2 chat prompts greedily with trace_dir= (chapter 21).
2. Bench: every registered solution (torch, the Triton kernels under the interpreter, and a
   planted one that is fast but wrong) runs on each Definition's workloads; each gets a Trace
   with an Evaluation (PASSED / INCORRECT_NUMERICAL / RUNTIME_ERROR) and, when it passed, its
   latency against the reference's.
3. Report: the per-definition table and a PNG plot.
4. Apply: a new engine with trace_set= picks, per op and shape bucket, the fastest solution that
   passed; the planted one is never picked, and greedy answers equal those of step 1.
Both engines run in fp32: apply may pick other kernels (another attention backend, another
RMSNorm), and only in fp32 do those give the same greedy tokens by construction; in bf16, the
default on a CPU with AVX-512 BF16, two correct kernels round differently and a near-tie may part
the answers.
On a CPU the interpreted Triton kernels are slow, so the torch ones win; the GPU figures come from
benchmarks/run_stage5_gpu.sh.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from flashinfer_bench.data import TraceSet

import minisgl.kernel.triton  # noqa: F401  (before anything imports triton: the CPU interpreter)
from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.ops import hook
from minisgl.trace.apply import best_per_bucket
from minisgl.trace.bench import BenchConfig, bench
from minisgl.trace.demo import chat_prompts
from minisgl.trace.report import plot, rows, table
from minisgl.trace.solutions import Impl, register, unregister
from minisgl.utils.offline import prepare_smollm2

SHOWN = ("fused_add_rmsnorm", "silu_and_mul", "minisgl_store_kv", "gqa_paged_decode")


def planted_norm(x, residual, weight, eps):
    """Fast and wrong: adds the residual but skips the normalisation."""
    total = x + residual
    return weight * total, total


def main() -> int:
    start = time.perf_counter()
    model = str(prepare_smollm2())
    greedy = SamplingParams(max_tokens=4)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "set"
        llm = LLM(model, trace_dir=str(root), max_running_reqs=8, dtype="float32")
        prompts = chat_prompts(llm)[:2]
        plain = llm.generate(prompts, greedy, use_tqdm=False)
        llm.shutdown()
        print(f"[{time.perf_counter() - start:5.1f} s] captured {root}")

        register(Impl("fused_add_rmsnorm", "planted", "python", planted_norm,
                      "planted: skips the norm"))
        try:
            # A few definitions and one workload each: the interpreter runs Triton slowly.
            bench(root, BenchConfig("cpu", warmup=0, iters=2, trials=1, max_workloads=1,
                                    definitions=SHOWN))
            print(f"[{time.perf_counter() - start:5.1f} s] benchmarked\n")
            found = rows(TraceSet.from_path(str(root)))
            print(table(found))
            png = plot(found, Path(tmp) / "report.png")
            print(f"plot: {png.name}, {png.stat().st_size} bytes\n")

            choices = best_per_bucket(TraceSet.from_path(str(root)), runtime_device())
            picks = sorted({c.impl.suffix for b in choices.values() for c in b.values()})
            print(f"apply would pick: {picks} (planted picked: {'planted' in picks})")
            llm = LLM(model, trace_set=str(root), max_running_reqs=8, dtype="float32")
            applied = llm.generate(prompts, greedy, use_tqdm=False)
            llm.shutdown()
        finally:
            unregister("fused_add_rmsnorm", "planted")
    same = [a["token_ids"] for a in applied] == [p["token_ids"] for p in plain]
    print(f"greedy tokens with apply == without: {same}")
    print(f"ch22 main took {time.perf_counter() - start:.1f} s")
    return 0 if same and "planted" not in picks else 1


def runtime_device():
    import torch

    assert hook.installed is None  # shutting the capture LLM down uninstalled its recorder
    return torch.device("cpu")


if __name__ == "__main__":
    sys.exit(main())
