"""Chapter 16: overlap scheduling, step by step.

Generates the same requests with the bundled SmolLM2 twice, with MINISGL_DISABLE_OVERLAP_SCHEDULING=1
and without, checks that the tokens are the same, and prints what each call of `step()` did: which
batch it launched and which batch's tokens it read. Without overlap a step reads the batch it has
just launched; with overlap it reads the one launched by the previous step, which the GPU finished
while this one was being built. (On a CPU nothing runs in parallel, so the times are alike.)
"""

from __future__ import annotations

import os
import sys
import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPTS = ["What is the capital of France?", "Name a prime number.", "Say hi."]
MAX_TOKENS = [6, 3, 4]


def traced_run(overlap: bool) -> tuple[list[list[int]], list[str], float]:
    os.environ["MINISGL_DISABLE_OVERLAP_SCHEDULING"] = "0" if overlap else "1"
    llm = LLM(MODEL, device="cpu", page_size=4, num_pages=256, seed=0)
    sched, engine = llm.scheduler, llm.scheduler.engine
    events: list[str] = []
    forward = engine.forward_batch
    launched = 0

    def traced_forward(batch):
        nonlocal launched
        launched += 1
        number = launched
        events.append(f"launch #{number} ({batch.phase}, {batch.size} req)")
        output = forward(batch)
        read = output.tolist

        def traced_read():
            events.append(f"read #{number}")
            return read()

        output.tolist = traced_read
        return output

    engine.forward_batch = traced_forward
    uids = [sched.add_request(llm.tokenizer.encode(p), SamplingParams(max_tokens=n))
            for p, n in zip(PROMPTS, MAX_TOKENS)]
    tokens: dict[int, list[int]] = {uid: [] for uid in uids}
    lines = []
    start = time.perf_counter()
    while sched.has_work:
        events.clear()
        outputs = sched.step()
        for out in outputs:
            tokens[out.uid].append(out.token)
        lines.append(f"step {len(lines):2d}: {', '.join(events) or '-':40s} -> "
                     f"{len(outputs)} token(s)")
        sched.check_integrity()
    elapsed = time.perf_counter() - start
    assert sched.stats().request_pages == 0
    llm.shutdown()
    return [tokens[u] for u in uids], lines, elapsed


def main() -> int:
    start = time.perf_counter()
    results = {}
    for overlap in (False, True):
        tokens, lines, elapsed = traced_run(overlap)
        results[overlap] = tokens
        print(f"overlap {'on' if overlap else 'off'} ({elapsed:.2f} s):")
        print("\n".join("  " + line for line in lines))
    same = results[True] == results[False]
    print(f"same tokens with and without overlap: {'yes' if same else 'NO'} "
          f"({', '.join(str(len(t)) for t in results[True])} tokens)")
    print(f"took {time.perf_counter() - start:.1f} s")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
