"""Offline throughput: random token prompts with random input and output lengths, ignore_eos.

    python -m minisgl.benchmark.offline --num-requests 32 --input-len 16 256 \
        --output-len 16 128 --compare-hf

With --compare-hf, Hugging Face transformers generates the same requests in the same process
(one left-padded batch, greedy) and the ratio of the two throughputs is printed; with --repeat N
the two run in N interleaved rounds and the median ratio is printed, which steadies the figure on
a noisy machine. Only the tokens
each request asked for count as output for both: HF's static batch keeps generating for rows that
are already done, which is exactly the waste continuous batching avoids.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.utils.hf import resolve_model


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]

    @property
    def output_tokens(self) -> int:
        return sum(self.output_lens)

    @property
    def input_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)


def make_workload(n: int, input_len: tuple[int, int], output_len: tuple[int, int], vocab: int,
                  seed: int) -> Workload:
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(*input_len))] for _ in range(n)]
    return Workload(prompts, [rng.randint(*output_len) for _ in range(n)])


def run_minisgl(llm: LLM, work: Workload, progress: bool = False) -> float:
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in work.output_lens]
    warmup = SamplingParams(max_tokens=2, ignore_eos=True)  # a prefill and a decode step
    llm.generate([[1, 2, 3, 4]] * 2, warmup, use_tqdm=False)
    llm.scheduler.flush_cache()  # no prefix hits from the warm-up: HF gets none either
    start = time.perf_counter()
    results = llm.generate(work.prompts, params, use_tqdm=progress)  # a bar per round
    elapsed = time.perf_counter() - start
    got = [len(r["token_ids"]) for r in results]
    if got != work.output_lens:
        raise RuntimeError("minisgl produced a different number of tokens than asked for")
    return elapsed


def load_hf(model_dir: str, dtype: torch.dtype, device: str, dummy_weight: bool):
    from transformers import AutoConfig, AutoModelForCausalLM

    if dummy_weight:  # random weights too: the speed of the architecture is what is compared
        config = AutoConfig.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    return model.to(device).eval()


def run_hf(model, work: Workload, device: str) -> float:
    from transformers import GenerationConfig

    longest = max(len(p) for p in work.prompts)
    pad = 0
    ids = torch.tensor([[pad] * (longest - len(p)) + p for p in work.prompts], device=device)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in work.prompts],
                        device=device)
    config = GenerationConfig(max_new_tokens=max(work.output_lens), do_sample=False,
                              eos_token_id=None, pad_token_id=pad)  # never stop early
    with torch.no_grad():
        warmup = GenerationConfig(max_new_tokens=2, do_sample=False, eos_token_id=None,
                                  pad_token_id=pad)
        model.generate(ids[:2, -8:], attention_mask=mask[:2, -8:],
                       generation_config=warmup)  # warm-up
        start = time.perf_counter()
        model.generate(ids, attention_mask=mask, generation_config=config)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--input-len", type=int, nargs=2, default=(16, 256), metavar=("MIN", "MAX"))
    parser.add_argument("--output-len", type=int, nargs=2, default=(16, 128),
                        metavar=("MIN", "MAX"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--page-size", type=int, default=16)
    parser.add_argument("--dummy-weight", action="store_true")
    parser.add_argument("--memory-ratio", type=float, default=0.5,
                        help="GPU memory share for the KV pool (the peer needs the rest)")
    parser.add_argument("--compare-hf", action="store_true")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of (minisgl, transformers); the median ratio is printed")
    args = parser.parse_args(argv)

    llm = LLM(args.model, dtype=args.dtype, page_size=args.page_size,
              dummy_weight=args.dummy_weight, memory_ratio=args.memory_ratio)
    mc = llm.scheduler.engine.model_config
    work = make_workload(args.num_requests, args.input_len, args.output_len,
                         min(mc.vocab_size, llm.tokenizer.vocab_size), args.seed)
    device, dtype = str(llm.scheduler.engine.device), llm.scheduler.config.dtype
    print(f"{args.num_requests} requests, {work.input_tokens} input and {work.output_tokens} "
          f"output tokens, {mc.architecture} on {device} ({str(dtype).removeprefix('torch.')})")
    peer = None
    if args.compare_hf:
        print("loading the transformers model for comparison", flush=True)
        model_dir = str(resolve_model(args.model, dummy_weight=args.dummy_weight))
        peer = load_hf(model_dir, dtype, device, args.dummy_weight)
    ratios = []
    for round_ in range(1, args.repeat + 1):  # interleaved, so both see the same machine state
        print(f"round {round_}/{args.repeat}: minisgl generates {len(work.prompts)} requests",
              flush=True)
        ours = run_minisgl(llm, work, progress=True)
        line = f"round {round_}: minisgl {ours:6.2f} s ({work.output_tokens / ours:6.1f} tok/s)"
        if peer is not None:
            print(f"round {round_}/{args.repeat}: transformers generates them as one padded batch "
                  "(a single call: no progress bar)", flush=True)
            theirs = run_hf(peer, work, device)
            ratios.append(theirs / ours)
            line += (f", transformers {theirs:6.2f} s ({work.output_tokens / theirs:6.1f} tok/s)"
                     f", speedup {ratios[-1]:.2f}x")
        print(line, flush=True)
    if ratios:
        print(f"speedup over transformers (median of {len(ratios)}): "
              f"{statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
