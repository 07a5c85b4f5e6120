"""Where the GPU time of one CUDA-graph decode step goes: every kernel of a replay, grouped by name.

    python benchmarks/profile_decode_step.py [--batch 1] [--steps 20] [--context 256] [--whole-step]

Qwen3-0.6B (random bf16 weights) with Triton attention and CUDA graphs: one request (or --batch)
is prefilled, then the graph of its decode step is replayed --steps times under torch.profiler.
Printed per step: the number of kernels, the sum of their durations, the wall time of a replay
(CUDA events), and so the idle time between kernels; then the kernels grouped by name with their
count and mean duration, largest total first. The figures say what to fuse next.

--whole-step then times --steps whole scheduler steps (batch preparation, the replay, sampling, the
token's copy to the host) and prints the GPU work that runs outside the graph: what a step costs
beyond its replay (a batch-1 step through LLM.generate took 0.95 ms on the H200 where its replay
took 0.81), and whether the GPU idles waiting for the host.
"""

from __future__ import annotations

import argparse
import time
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
    parser.add_argument("--whole-step", action="store_true",
                        help="also profile whole scheduler steps: the GPU work outside the graph")
    args = parser.parse_args()
    llm = LLM("Qwen/Qwen3-0.6B", dtype="bfloat16", dummy_weight=True, num_pages=4096,
              max_running_reqs=max(8, args.batch), cuda_graph_max_bs=max(8, args.batch))
    sched = llm.scheduler
    gen = torch.Generator().manual_seed(0)
    # Enough tokens for the warm-up and the whole-step runs, and no more: a request that does not
    # fit the pool is refused, and the replays would then time a graph over empty sequences.
    max_tokens = 5 + 2 * args.steps + 8
    for _ in range(args.batch):
        prompt = torch.randint(1, 150000, (args.context,), generator=gen).tolist()
        sched.add_request(prompt, SamplingParams(max_tokens=max_tokens, ignore_eos=True))
    for _ in range(5):  # the prefill, then a few decode steps so the graph is warm
        for out in sched.step():
            if out.error:
                raise SystemExit(f"request {out.uid} refused: {out.error}")
    if len(sched.decode.running) != args.batch:
        raise SystemExit(f"{len(sched.decode.running)} requests decoding, not {args.batch}")
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
    kernels = [e for e in gpu_events(prof) if "Memcpy" not in e.name and "Memset" not in e.name]
    by_name = group_by_name(kernels)
    busy_us = sum(e.device_time for e in kernels) / args.steps
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; Qwen3-0.6B random bf16, "
          f"batch {args.batch} (graph of {batch_size}), context ~{args.context} tokens")
    print(f"per replay: {len(kernels) / args.steps:.0f} kernels, kernel time {busy_us:.1f} us, "
          f"replay wall time {wall_us:.1f} us, idle between kernels {wall_us - busy_us:.1f} us "
          f"({(wall_us - busy_us) / max(1, len(kernels) / args.steps):.2f} us per kernel)")
    print(f"{'per step':>8} {'mean us':>8} {'total us':>9}  kernel")
    print_table(by_name, args.steps)
    if args.whole_step:
        whole_step(sched, args.steps, by_name)
    llm.shutdown()
    return 0


def gpu_events(prof: profile) -> list:
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def group_by_name(events: list) -> dict[str, list[float]]:
    by_name: dict[str, list[float]] = defaultdict(list)
    for e in events:
        by_name[e.name].append(e.device_time)
    return by_name


def print_table(by_name: dict[str, list[float]], steps: int, top: int = 30) -> None:
    rows = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))
    for name, times in rows[:top]:
        print(f"{len(times) / steps:8.1f} {sum(times) / len(times):8.2f} "
              f"{sum(times) / steps:9.1f}  {name[:110]}")


def whole_step(sched, steps: int, replay: dict[str, list[float]]) -> None:
    """Whole scheduler steps: wall time per step, GPU time per step, and the GPU work beyond the
    replay's (by name, the replay's own count of each name taken off: what is left ran outside
    the graph, or is a kernel the replay runs more or less often than the profiled replays)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        sched.step()
    torch.cuda.synchronize()
    wall_us = (time.perf_counter() - start) * 1e6 / steps
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            sched.step()
        torch.cuda.synchronize()
    events = gpu_events(prof)
    busy_us = sum(e.device_time for e in events) / steps
    replay_us = sum(sum(times) for times in replay.values()) / steps
    outside: dict[str, list[float]] = {}
    for name, times in group_by_name(events).items():
        extra = len(times) - len(replay.get(name, []))  # both lists cover `steps` steps
        if extra > 0:
            outside[name] = sorted(times)[:extra]  # the shortest: a guess at which ones they are
    outside_us = sum(sum(t) for t in outside.values()) / steps
    print(f"whole step: wall {wall_us:.1f} us per step; GPU busy {busy_us:.1f} us (replay's kernels "
          f"{replay_us:.1f}, outside the graph {outside_us:.1f}); GPU idle {wall_us - busy_us:.1f} "
          f"us per step")
    print(f"{'per step':>8} {'mean us':>8} {'total us':>9}  GPU work outside the graph")
    print_table(outside, steps)


if __name__ == "__main__":
    raise SystemExit(main())
