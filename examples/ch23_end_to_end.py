"""Chapter 23: the loop end to end, and what bounds it.

On the bundled SmolLM2 (CPU), one engine:
1. default: 4 chat prompts, greedy, 6 tokens each, timed;
2. capture: the same requests with a recorder installed (chapter 21);
3. bench: the torch solutions on every captured workload (chapter 22);
4. apply: the same requests with the applier installed, timed, tokens compared with step 1.
The engine is built once and the trace runtime installed as the op registry's hook and removed
around each step (what LLM(trace_dir=...) / LLM(trace_set=...) do at start-up), so the model is
loaded once.

On a CPU the default engine already runs the torch code (the Triton kernels and CUDA graphs are
GPU paths), so torch-only == default here; the three-way comparison on the H200 comes from
benchmarks/run_stage5_gpu.sh. Then: where the traced ops' time goes (calls x measured latency)
and the roofline arithmetic of decode, for SmolLM2 and for Qwen3-0.6B on an H200.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.models.config import ModelConfig
from minisgl.ops.hook import install
from minisgl.trace import roofline
from minisgl.trace.apply import Applier
from minisgl.trace.bench import BenchConfig, bench
from minisgl.trace.breakdown import format_times, op_times
from minisgl.trace.capture import Recorder
from minisgl.trace.demo import chat_prompts
from minisgl.trace.runtime import Runtime
from minisgl.utils.offline import QWEN3_CONFIG, prepare_smollm2

TOKENS = 6


def timed(llm: LLM, prompts: list, params: SamplingParams) -> tuple[list, float]:
    start = time.perf_counter()
    out = llm.generate(prompts, params, use_tqdm=False)
    return out, time.perf_counter() - start


def main() -> int:
    start = time.perf_counter()
    model = prepare_smollm2()
    llm = LLM(str(model), max_running_reqs=4)
    prompts = chat_prompts(llm)[:4]
    params = SamplingParams(max_tokens=TOKENS, ignore_eos=True)
    n_tokens = len(prompts) * TOKENS
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "set"
        llm.generate(prompts[:1], SamplingParams(max_tokens=2), use_tqdm=False)  # warm-up
        default, s_default = timed(llm, prompts, params)

        recorder = Recorder(root)
        install(Runtime(recorder))
        try:
            _, s_capture = timed(llm, prompts, params)
        finally:
            recorder.close()
            install(None)
        bench(root, BenchConfig("cpu", warmup=1, iters=2, trials=1, solutions=("torch",),
                                max_workloads=3))

        install(Runtime(applier=Applier.load(root, torch.device("cpu"))))
        try:
            applied, s_apply = timed(llm, prompts, params)
        finally:
            install(None)
        llm.shutdown()

        print(f"\n{'run':<22} {'s':>6} {'tok/s':>7}   ({len(prompts)} requests x {TOKENS} tokens)")
        for name, s in [("torch-only = default", s_default), ("capture (recording)", s_capture),
                        ("apply", s_apply)]:
            print(f"{name:<22} {s:6.2f} {n_tokens / s:7.1f}")
        same = [a["token_ids"] for a in applied] == [d["token_ids"] for d in default]
        print(f"greedy tokens with apply == default: {same}")

        print("\nwhere the traced ops' time goes (calls counted by the capture x bench latency):")
        print(format_times(op_times(root)))

    smol = ModelConfig.from_path(str(model))
    qwen = ModelConfig.from_dict(QWEN3_CONFIG)
    for name, cfg, context in [("SmolLM2-135M", smol, 256), ("Qwen3-0.6B", qwen, 1024)]:
        print(f"\nroofline of {name} decode ({roofline.linear_params(cfg) / 1e6:.0f} M linear "
              f"params, {roofline.kv_bytes_per_token(cfg) / 1024:.0f} KiB of KV per token):")
        print(roofline.table(cfg, roofline.H200, [1, 8, 64, 256], context))
    print(f"ch23 main took {time.perf_counter() - start:.1f} s")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
