"""Where the GPU time of one CUDA-graph decode step goes: every kernel of a replay, grouped by name.

    python benchmarks/profile_decode_step.py [--batch 1] [--steps 20] [--context 256]

Qwen3-0.6B (random bf16 weights) with Triton attention and CUDA graphs: one request (or --batch)
is prefilled, then the graph of its decode step is replayed --steps times under torch.profiler.
Printed per step: the number of kernels, the sum of their durations, the wall time of a replay
(CUDA events), and so the idle time between kernels; then the kernels grouped by name with their
count and mean duration, largest total first. The figures say what to fuse next.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
from torch.profiler import ProfilerActivity, profile

from minisgl.core import SamplingParams
from minisgl.llm import LLM


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--context", type=int, default=256, help="prompt tokens per request")
    args = parser.parse_args()
    llm = LLM("Qwen/Qwen3-0.6B", dtype="bfloat16", dummy_weight=True, num_pages=4096,
              max_running_reqs=max(8, args.batch), cuda_graph_max_bs=max(8, args.batch))
    sched = llm.scheduler
    gen = torch.Generator().manual_seed(0)
    for _ in range(args.batch):
        prompt = torch.randint(1, 150000, (args.context,), generator=gen).tolist()
        sched.add_request(prompt, SamplingParams(max_tokens=10_000, ignore_eos=True))
    for _ in range(5):  # the prefill, then a few decode steps so the graph is warm
        sched.step()
    runner = sched.engine.graph_runner
    batch_size = next(bs for bs in runner.sizes if bs >= args.batch)
    graph = runner.graphs[batch_size]
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(args.steps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    wall_us = start.elapsed_time(end) * 1000 / args.steps
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            graph.replay()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and "Memcpy" not in e.name and "Memset" not in e.name]
    by_name: dict[str, list[float]] = defaultdict(list)
    for e in kernels:
        by_name[e.name].append(e.device_time)
    busy_us = sum(e.device_time for e in kernels) / args.steps
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; Qwen3-0.6B random bf16, "
          f"batch {args.batch} (graph of {batch_size}), context ~{args.context} tokens")
    print(f"per replay: {len(kernels) / args.steps:.0f} kernels, kernel time {busy_us:.1f} us, "
          f"replay wall time {wall_us:.1f} us, idle between kernels {wall_us - busy_us:.1f} us "
          f"({(wall_us - busy_us) / max(1, len(kernels) / args.steps):.2f} us per kernel)")
    print(f"{'per step':>8} {'mean us':>8} {'total us':>9}  kernel")
    rows = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    for name, times in rows[:30]:
        print(f"{len(times) / args.steps:8.1f} {sum(times) / len(times):8.2f} "
              f"{sum(times) / args.steps:9.1f}  {name[:110]}")
    llm.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
