"""Where the official workload's time goes (issue 32): the official mini-sglang bench.py's requests
(256 prompts of 100-1024 random tokens, 100-1024 output tokens, temperature 0.6, seed 0, the same
engine settings) through `LLM.generate`, with CUDA events around every forward pass.

    MINISGL_DUMMY_WEIGHT=1 python benchmarks/official_timeline.py

It prints the wall time and throughput, then the GPU time of the prefill steps and of the decode
steps grouped by batch size (steps, GPU ms per step, the wall-clock ms from one launch to the next), and what
is left: the time the GPU had nothing queued. With overlap scheduling a step's events bracket only
its own kernels (the start event fires when the GPU reaches it), so the sum of the steps' GPU
times against the wall time says whether the run was GPU-bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from random import randint, seed

import torch

from minisgl.core import Batch, SamplingParams
from minisgl.llm import LLM

BUCKETS = [(193, 256), (129, 192), (65, 128), (17, 64), (2, 16), (1, 1)]


@dataclass
class Step:
    prefill: bool
    size: int  # requests
    tokens: int  # new tokens computed
    launched: float  # host clock when forward_batch was called
    start: torch.cuda.Event
    end: torch.cuda.Event


def official_workload() -> tuple[list[list[int]], list[SamplingParams]]:
    """bench.py's draws, in its order (seed 0)."""
    seed(0)
    prompts = [[randint(0, 10000) for _ in range(randint(100, 1024))] for _ in range(256)]
    params = [SamplingParams(temperature=0.6, ignore_eos=True, max_tokens=randint(100, 1024))
              for _ in range(256)]
    return prompts, params


def instrument(llm: LLM) -> list[Step]:
    engine = llm.scheduler.engine
    steps: list[Step] = []
    forward = engine.forward_batch

    def timed(batch: Batch):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        launched = time.perf_counter()
        start.record()
        out = forward(batch)
        end.record()
        tokens = sum(r.extend_len for r in batch.reqs) if batch.is_prefill else batch.size
        steps.append(Step(batch.is_prefill, batch.size, tokens, launched, start, end))
        return out

    engine.forward_batch = timed
    return steps


def main() -> int:
    llm = LLM("Qwen/Qwen3-0.6B", max_seq_len_override=4096, max_extend_tokens=16384,
              cuda_graph_max_bs=256, page_size=256)
    prompts, params = official_workload()
    llm.generate(["Benchmark: "], SamplingParams(temperature=0.1))  # warm-up, as bench.py
    llm.generate(prompts, params, use_tqdm=False)  # a whole run first: Triton and cuBLAS warm
    llm.scheduler.flush_cache()  # else the measured run finds every prompt in the prefix cache
    steps = instrument(llm)
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    torch.cuda.synchronize()
    wall = time.perf_counter() - start
    total = sum(p.max_tokens for p in params)
    gpu = [s.start.elapsed_time(s.end) for s in steps]
    host = [b.launched - a.launched for a, b in zip(steps, steps[1:])] + [0.0]
    print(f"{torch.cuda.get_device_name()}: {total} output tokens in {wall:.2f} s = "
          f"{total / wall:.0f} tok/s; {len(steps)} forward passes, GPU busy "
          f"{sum(gpu) / 1000:.2f} s ({sum(gpu) / 10 / wall:.1f}% of wall)")
    pre = [i for i, s in enumerate(steps) if s.prefill]
    print(f"prefill: {len(pre)} steps, {sum(steps[i].tokens for i in pre)} tokens, GPU "
          f"{sum(gpu[i] for i in pre):.0f} ms, wall {sum(host[i] for i in pre) * 1e3:.0f} ms")
    for lo, hi in BUCKETS:
        ids = [i for i, s in enumerate(steps) if not s.prefill and lo <= s.size <= hi]
        if not ids:
            continue
        g, h = sum(gpu[i] for i in ids), sum(host[i] for i in ids) * 1e3
        print(f"decode bs {lo:>3}-{hi:<3}: {len(ids):>4} steps, "
              f"{sum(steps[i].tokens for i in ids):>6} tokens, GPU {g:7.0f} ms ({g / len(ids):.3f} ms/step), wall {h:7.0f} ms "
              f"({h / len(ids):.3f} ms/step)")
    print(f"timeline official-bench tok/s={total / wall:.0f} gpu-busy={sum(gpu) / 10 / wall:.1f}%")
    llm.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
