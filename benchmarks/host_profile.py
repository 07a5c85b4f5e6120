"""Where the host's time goes in a decode step (issue 32): the scheduler path of
decode_latency.py (Qwen3-0.6B random bf16, CUDA graphs, overlap scheduling) at a few batch sizes,
once timed and once under cProfile, with the functions that took the most time of their own.

    python benchmarks/host_profile.py [--batch-sizes 64 256] [--steps 200] [--temperature 0.6]

With overlap scheduling the host builds step N+1 while the GPU runs step N, so a step costs
max(GPU, host); the figures here say how much of the host's share is Python (scheduler, sampler
set-up, graph inputs) and how much is waiting for the GPU (`synchronize` in the profile).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch
from decode_latency import random_prompts, random_qwen3_folder

from minisgl.core import SamplingParams
from minisgl.llm import LLM


def run_steps(llm: LLM, prompts: list[list[int]], steps: int, temperature: float,
              profiler: cProfile.Profile | None = None) -> float:
    """ms per decode step over `steps` decode steps after one prefill (profiled if asked)."""
    sched = llm.scheduler
    params = SamplingParams(max_tokens=steps + 1, ignore_eos=True, temperature=temperature)
    for p in prompts:
        sched.add_request(p, params)
    while sched.stats().running_requests < len(prompts):
        sched.step()  # the prefill(s)
    if profiler is not None:
        profiler.enable()
    start = time.perf_counter()
    while sched.has_work:
        sched.step()
    elapsed = time.perf_counter() - start
    if profiler is not None:
        profiler.disable()
    sched.flush_cache()
    return elapsed / steps * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=25, help="functions shown per profile")
    args = parser.parse_args()
    folder = random_qwen3_folder()
    max_bs = max(args.batch_sizes)
    llm = LLM(folder, dtype="bfloat16", device="cuda", max_running_reqs=max_bs, page_size=16,
              num_pages=max_bs * (args.prompt_len + args.steps + 16) // 16 + 64)
    run_steps(llm, random_prompts(2, args.prompt_len, seed=0), 8, args.temperature)  # warm-up
    for bs in args.batch_sizes:
        prompts = random_prompts(bs, args.prompt_len, seed=bs)
        plain = run_steps(llm, prompts, args.steps, args.temperature)
        profiler = cProfile.Profile()
        profiled = run_steps(llm, prompts, args.steps, args.temperature, profiler)
        print(f"host-profile bs={bs} temperature={args.temperature} ms/step={plain:.3f} "
              f"(under cProfile {profiled:.3f})", flush=True)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(args.top)
        print(text.getvalue().split("\n\n", 1)[-1].replace(str(torch.__file__)[:-12], ""))
    llm.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
