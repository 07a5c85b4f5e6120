"""A long prompt beside a running request, on a CPU: how long the prompt's prefill takes with a given
prefill budget (--max-prefill-length), how long one step gets, and how long the running request
waits between two of its tokens meanwhile (issue 28: an 8191-token prompt held everyone for minutes).

    python benchmarks/long_prefill.py [--prompt-len 8191] [--budgets 512 1024 8192] [--threads N]

The bundled SmolLM2-135M (fp32) runs through the scheduler as a library: one short request is
started and decodes; then the long prompt (token ids cycling through the vocabulary, max_tokens 1)
is added and the scheduler steps until the long prompt's first token is out. Each line says, for
one budget: the prefill's chunks and wall time, the longest step, and the running request's tokens
and longest gap between two of them during the prefill. Wall-clock figures on a shared machine are
noisy; the run prints the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.utils.offline import prepare_smollm2


def run(path: str, prompt_len: int, budget: int) -> str:
    sched = Scheduler(SchedulerConfig(model_path=path, page_size=16, max_prefill_length=budget,
                                      max_running_reqs=8, max_seq_len=8192, seed=0))
    running = sched.add_request(list(range(100, 116)), SamplingParams(max_tokens=4000,
                                                                      ignore_eos=True))
    for _ in range(3):
        sched.step()  # its prefill and first decode steps (the step in flight included)
    long = sched.add_request([(i * 7919) % 49000 + 10 for i in range(prompt_len)],
                             SamplingParams(max_tokens=1))
    start = last_token = time.perf_counter()
    steps, gaps, tokens, prefills = [], [], 0, sched.stats().prefill_batches
    done = False
    while not done:
        t = time.perf_counter()
        outputs = sched.step()
        now = time.perf_counter()
        steps.append(now - t)
        for out in outputs:
            if out.uid == running:
                tokens += 1
                gaps.append(now - last_token)
                last_token = now
            done |= out.uid == long
    total = time.perf_counter() - start
    gaps.append(time.perf_counter() - last_token)  # the wait since its last token
    chunks = sched.stats().prefill_batches - prefills
    sched.abort(running)
    sched.shutdown()
    return (f"budget {budget:5d}: prompt of {prompt_len} tokens prefilled in {chunks} chunks, "
            f"{total:.1f} s; longest step {max(steps):.2f} s; the running request got {tokens} "
            f"tokens meanwhile, longest gap between two {max(gaps):.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompt-len", type=int, default=8191)
    parser.add_argument("--budgets", type=int, nargs="+", default=[512, 1024, 8192])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    path = str(prepare_smollm2())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    for budget in args.budgets:
        print(run(path, args.prompt_len, budget), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
