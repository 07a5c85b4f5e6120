"""Batch-1 decode on the CPU: the bundled SmolLM2 through `LLM.generate` against Hugging Face
transformers' eager `generate` in fp32, greedy, the same prompt and the same number of tokens, in
one process (issue 33: the engine's ms per token, HF's, and the ratio; plus whether the greedy
tokens agree).

    python benchmarks/cpu_decode.py [--tokens 64] [--dtype auto|float32|bfloat16] [--repeat 3]
                                    [--op-by-op]

Per-token time: (time for 1 + N tokens - time for 1 token) / N, for both sides, so that the
prefill of the prompt is left out of both. Each figure is the median of --repeat runs.
--op-by-op switches off the engine's one-call C++ decode step (engine/cpu_step.py): each op is
called from Python, as before it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import transformers

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.utils.hf import resolve_model

PROMPT = "The three most useful things to know about paged attention are"


def per_token_ms(run: Callable[[int], tuple[float, list[int]]], tokens: int, repeat: int
                 ) -> tuple[float, list[int]]:
    """run(n) generates n tokens and returns (seconds, the tokens): the median over `repeat` runs
    of (time of 1 + tokens - time of 1) / tokens, and the last run's tokens."""
    run(2)  # warm-up
    times = []
    for _ in range(repeat):
        first, _ = run(1)
        full, out = run(1 + tokens)
        times.append((full - first) / tokens * 1000)
    return statistics.median(times), out


def ours_ms(llm: LLM, ids: list[int], tokens: int, repeat: int) -> tuple[float, list[int]]:
    def run(n: int) -> tuple[float, list[int]]:
        params = SamplingParams(max_tokens=n, ignore_eos=True, temperature=0)
        start = time.perf_counter()
        out = llm.generate([ids], params, use_tqdm=False)[0]["token_ids"]
        elapsed = time.perf_counter() - start
        llm.scheduler.flush_cache()  # every run prefills the prompt again, as HF's does
        return elapsed, out

    return per_token_ms(run, tokens, repeat)


def hf_ms(model, ids: list[int], tokens: int, repeat: int) -> tuple[float, list[int]]:
    from transformers import GenerationConfig

    x = torch.tensor([ids])

    def run(n: int) -> tuple[float, list[int]]:
        config = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                  eos_token_id=None, pad_token_id=0)
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(x, attention_mask=torch.ones_like(x), generation_config=config)
        return time.perf_counter() - start, out[0, len(ids):].tolist()

    return per_token_ms(run, tokens, repeat)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--dtype", default="auto", help="the engine's dtype (HF runs fp32)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--op-by-op", action="store_true",
                        help="no one-call C++ decode step: the ops one by one from Python")
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    llm = LLM(path, device="cpu", dtype=args.dtype)
    engine = llm.scheduler.engine
    if args.op_by_op:
        engine.cpu_step = None
    ids = llm.tokenizer.encode(PROMPT)
    print(f"CPU: {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch "
          f"{torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), transformers "
          f"{transformers.__version__}; SmolLM2-135M-Instruct, prompt of {len(ids)} tokens, "
          f"{args.tokens} new tokens, greedy; engine dtype {llm.scheduler.config.dtype}, "
          f"HF fp32 eager; decode steps {'one C++ call' if engine.cpu_step else 'op by op'}; "
          f"median of {args.repeat}", flush=True)
    ours, ours_tokens = ours_ms(llm, ids, args.tokens, args.repeat)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    theirs, hf_tokens = hf_ms(hf, ids, args.tokens, args.repeat)
    same = next((i for i, (a, b) in enumerate(zip(ours_tokens, hf_tokens)) if a != b), None)
    print(f"minisgl LLM.generate: {ours:7.2f} ms/token")
    print(f"HF generate (fp32):   {theirs:7.2f} ms/token")
    print(f"ratio HF/minisgl:     {theirs / ours:7.2f}x")
    print("greedy tokens: " + ("identical" if same is None else f"differ from token {same} on"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
