"""Chapter 15: decode steps replayed from CUDA graphs.

Without a GPU this only shows what the engine would capture: the ladder of batch sizes and which
captured graph (and how many padding rows) would serve a few batch sizes. On a GPU it generates
with the bundled SmolLM2 twice, with CUDA graphs and without (both with Triton attention),
checks that the greedy tokens are the same, and prints the time of one decode step of each."""

from __future__ import annotations

import sys
import time

import torch

from minisgl.core import SamplingParams
from minisgl.engine.graph import DEFAULT_MAX_BS, graph_batch_sizes, padded_size

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
DECODE_STEPS = 64


def show_ladder() -> None:
    sizes = graph_batch_sizes(DEFAULT_MAX_BS)
    print(f"ladder for cuda_graph_max_bs={DEFAULT_MAX_BS} ({len(sizes)} graphs): "
          f"{' '.join(map(str, sizes))}")
    for batch_size in (1, 3, 5, 17, 100, 256, 300):
        size = padded_size(sizes, batch_size)
        if size is None:
            print(f"decode batch of {batch_size:3d}: eager (larger than the largest graph)")
        else:
            print(f"decode batch of {batch_size:3d}: graph {size:3d} with "
                  f"{size - batch_size} padding row(s)")
    print("prefill batches: always eager")


def ms_per_decode_step(llm, prompts: list[list[int]]) -> tuple[float, list[list[int]]]:
    """Run every prompt to DECODE_STEPS + 1 tokens through the scheduler; the mean time of the
    decode steps (all requests decode together after one prefill step) and the tokens."""
    sched = llm.scheduler
    params = SamplingParams(max_tokens=DECODE_STEPS + 1, ignore_eos=True)
    uids = [sched.add_request(p, params) for p in prompts]
    tokens: dict[int, list[int]] = {u: [] for u in uids}
    for out in sched.step():  # the prefill
        tokens[out.uid].append(out.token)
    start = time.perf_counter()
    while sched.has_work:
        for out in sched.step():  # step() returns after the sampled tokens reached the CPU
            tokens[out.uid].append(out.token)
    elapsed = time.perf_counter() - start
    sched.flush_cache()
    return elapsed / DECODE_STEPS * 1000, [tokens[u] for u in uids]


def compare_on_gpu() -> bool:
    from minisgl.llm import LLM

    prompts = [[(7 * i + 13 * j) % 40000 + 100 for j in range(24 + 5 * i)] for i in range(8)]
    results = {}
    for graphs in (False, True):
        llm = LLM(MODEL, attention_backend="triton", cuda_graph_max_bs=None if graphs else 0,
                  max_running_reqs=8, num_pages=4096, page_size=16)
        assert bool(llm.scheduler.engine.graph_runner.graphs) == graphs
        ms_per_decode_step(llm, prompts[:1])  # warm-up
        results[graphs] = {n: ms_per_decode_step(llm, prompts[:n]) for n in (1, 8)}
        llm.shutdown()
    same = True
    for n in (1, 8):
        (eager_ms, eager_tokens), (graph_ms, graph_tokens) = results[False][n], results[True][n]
        same &= eager_tokens == graph_tokens
        print(f"batch {n}: eager {eager_ms:.2f} ms/step, CUDA graphs {graph_ms:.2f} ms/step "
              f"({eager_ms / graph_ms:.1f}x); same greedy tokens: "
              f"{'yes' if eager_tokens == graph_tokens else 'NO'}")
    return same


def main() -> int:
    show_ladder()
    if not torch.cuda.is_available():
        print("CUDA graphs need a GPU: none here, so the engine runs every step eagerly")
        return 0
    return 0 if compare_on_gpu() else 1


if __name__ == "__main__":
    began = time.perf_counter()
    code = main()
    print(f"took {time.perf_counter() - began:.1f} s")
    sys.exit(code)
