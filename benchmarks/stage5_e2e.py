"""Chapter 23 on a GPU: end-to-end figures of the FlashInfer Trace loop (one mode per process,
because MINISGL_DISABLE_FUSED_KERNELS is read once).

    python benchmarks/stage5_e2e.py capture DIR [--scale S]     the official workload, recorded
    python benchmarks/stage5_e2e.py run {torch,default,apply,flashinfer} [--trace-set DIR] [--scale S]
                                    [--repeat N]   (median of N runs, default 3)
    python benchmarks/stage5_e2e.py greedy {default,apply} OUT.json [--trace-set DIR]  (fp32)
    python benchmarks/stage5_e2e.py latency [--trace-set DIR]  batch-1 decode, ms per token
    python benchmarks/stage5_e2e.py roofline PNG [--trace-set DIR]

torch: --attn torch and MINISGL_DISABLE_FUSED_KERNELS=1 (set by the caller); default: the engine
as it ships (Triton attention, fused kernels, CUDA graphs); apply: default + trace_set=DIR.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from minisgl.benchmark.offline import official_workload, run_minisgl
from minisgl.core import SamplingParams
from minisgl.llm import LLM

MODEL = "Qwen/Qwen3-0.6B"
ENGINE = dict(max_seq_len_override=4096, max_extend_tokens=16384, cuda_graph_max_bs=256,
              page_size=256, dummy_weight=True)


def build(mode: str, trace_set: str | None, **extra) -> LLM:
    kw = dict(ENGINE, **extra)
    if mode == "torch":
        kw["attention_backend"] = "torch"
        kw["cuda_graph_max_bs"] = 0  # the torch backend cannot be captured
    if mode == "apply":
        kw["trace_set"] = trace_set
    if mode == "flashinfer":  # the default engine on FlashInfer's attention (chapter 23)
        kw["attention_backend"] = "flashinfer"
    return LLM(MODEL, **kw)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["capture", "run", "greedy", "latency", "roofline"])
    p.add_argument("arg", nargs="*")
    p.add_argument("--trace-set", default=None)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--repeat", type=int, default=3, help="runs of the workload (run: median)")
    a = p.parse_args()
    if a.what == "capture":
        llm = LLM(MODEL, trace_dir=a.arg[0], **ENGINE)
        work = official_workload(256, a.scale)
        s = run_minisgl(llm, work)
        llm.shutdown()
        print(f"capture: {work.output_tokens} tokens in {s:.1f} s "
              f"({work.output_tokens / s:.0f} tok/s while recording) -> {a.arg[0]}")
    elif a.what == "run":
        mode = a.arg[0]
        llm = build(mode, a.trace_set)
        work = official_workload(256, a.scale)
        # a run at SCALE 0.25 lasts about a second, so one run's noise is a few percent: the
        # median of several (each from an empty cache) is what apply and default compare on
        rounds = sorted(run_minisgl(llm, work) for _ in range(a.repeat))
        for i, s in enumerate(rounds):
            print(f"round {i + 1}/{a.repeat} (sorted): {s:.3f} s")
        s = rounds[len(rounds) // 2]
        print(f"RESULT {mode}: {work.output_tokens} output tokens in {s:.2f} s = "
              f"{work.output_tokens / s:.0f} tok/s (median of {a.repeat})")
    elif a.what == "greedy":
        mode, out = a.arg
        llm = build(mode, a.trace_set, dtype="float32", max_running_req=64)
        work = official_workload(32, 0.1)
        res = llm.generate(work.prompts, SamplingParams(max_tokens=32, ignore_eos=True),
                           use_tqdm=False)
        with open(out, "w") as f:
            json.dump([r["token_ids"] for r in res], f)
        print(f"greedy {mode}: {len(res)} requests -> {out}")
    elif a.what == "latency":
        for mode in (["default", "apply"] if a.trace_set else ["default"]):
            llm = build(mode, a.trace_set)
            sp = SamplingParams(max_tokens=256, ignore_eos=True)
            llm.generate([[1] * 128], SamplingParams(max_tokens=4, ignore_eos=True),
                         use_tqdm=False)
            torch.cuda.synchronize()
            t = time.perf_counter()
            llm.generate([[1] * 128], sp, use_tqdm=False)
            torch.cuda.synchronize()
            ms = (time.perf_counter() - t) / 256 * 1e3
            print(f"RESULT batch-1 {mode}: {ms:.2f} ms per token ({1e3 / ms:.0f} tok/s)")
            llm.shutdown()
    else:
        roofline(a.arg[0])


def roofline(path: str) -> None:
    """Bytes and FLOPs per generated token of Qwen3-0.6B decode (bf16) against the H200
    (minisgl.trace.roofline): weights read once per step and shared by the batch, each token
    reading its own K/V over a 1024-token context."""
    from minisgl.models.config import ModelConfig
    from minisgl.trace import roofline as rf
    from minisgl.utils.offline import QWEN3_CONFIG

    cfg = ModelConfig.from_dict(QWEN3_CONFIG)
    batches = [1, 8, 32, 64, 128, 256]
    print(rf.table(cfg, rf.H200, batches, 1024))
    rf.plot([rf.decode_cost(cfg, b, 1024) for b in batches], rf.H200, path, "Qwen3-0.6B decode")
    print(f"roofline: {path}")


if __name__ == "__main__":
    main()
