"""Decode latency: milliseconds per decode step of Qwen3-0.6B (random bf16 weights), through the
whole scheduler path (`LLM`'s scheduler: batch building, the forward pass, sampling, the tokens back
on the CPU), with CUDA graphs and without, beside Hugging Face transformers generate on the same
weights in the same process.

    python benchmarks/decode_latency.py [--batch-sizes 1 64] [--steps 200] [--prompt-len 32]
        [--graphs-only | --hf-static]

With overlap scheduling (chapter 16, on unless MINISGL_DISABLE_OVERLAP_SCHEDULING=1) a step returns
once the previous step's tokens are on the CPU, while it has already launched the next one; the
figure is still the time of the whole run divided by its decode steps.

Each batch runs `--steps` decode steps after one prefill step; the figure is the mean over those
steps. HF's figure is (time of generate for 1 + N tokens - time for 1 token) / N, with its default
dynamic cache; `--hf-static` times transformers alone at its fastest instead, with a static cache,
whose decode step generate compiles (torch.compile, CUDA graphs) on its first call (on a fresh
machine a minute or more). With graphs, the GPU time of the replays (CUDA events around each
replay, input copies included) is printed too: what is left of a step is the scheduler's and
sampler's host time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

import torch
import transformers

from minisgl.core import SamplingParams
from minisgl.env import load_env
from minisgl.llm import LLM
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model

DEVICE = "cuda"
TARGET_MS = 1.0  # batch 1 with CUDA graphs


def random_qwen3_folder() -> str:
    """Qwen3-0.6B with HF's own random initialisation in bf16, saved with the tokenizer, so that
    both engines load the very same weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    qwen = resolve_model("Qwen/Qwen3-0.6B", dummy_weight=True)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(qwen),
                                             dtype=torch.bfloat16)
    folder = tempfile.mkdtemp(prefix="qwen3-0.6b-")
    model.save_pretrained(folder)
    load_tokenizer(qwen).hf.save_pretrained(folder)
    return folder


def random_prompts(batch: int, length: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(1, 150000, (batch, length), generator=gen).tolist()


def replay_timer(llm: LLM) -> list[tuple[torch.cuda.Event, torch.cuda.Event]]:
    """CUDA events around every replay from now on."""
    runner = llm.scheduler.engine.graph_runner
    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    replay = runner.replay

    def timed(batch):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        logits = replay(batch)
        end.record()
        events.append((start, end))
        return logits

    runner.replay = timed
    return events


def ms_per_decode_step(llm: LLM, prompts: list[list[int]], steps: int) -> float:
    sched = llm.scheduler
    params = SamplingParams(max_tokens=steps + 1, ignore_eos=True)
    for p in prompts:
        sched.add_request(p, params)
    sched.step()  # the prefill of every prompt
    decode_steps = sched.stats().decode_batches
    start = time.perf_counter()
    while sched.has_work:
        sched.step()  # returns once the previous (overlap) or this step's tokens are on the CPU
    elapsed = time.perf_counter() - start
    assert sched.stats().decode_batches - decode_steps == steps, "prefill took several steps"
    sched.flush_cache()
    return elapsed / steps * 1000


def hf_ms_per_step(model, prompts: list[list[int]], steps: int, static: bool = False) -> float:
    """static: a static KV cache, which makes generate compile its decode step (the prefill runs
    uncompiled); the warm-up asks for as many tokens as the timed run, so the step it compiles is
    the one timed (the same cache length: another would compile again)."""
    from transformers import GenerationConfig

    ids = torch.tensor(prompts, device=DEVICE)
    mask = torch.ones_like(ids)

    def generate(new_tokens: int) -> float:
        config = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                                  pad_token_id=0, cache_implementation="static" if static else None)
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=mask, generation_config=config)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    generate(1 + steps if static else 2)  # warm-up (static: the compilation)
    return (generate(1 + steps) - generate(1)) / steps * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 64])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hf-steps", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--graphs-only", action="store_true",
                        help="only minisgl with CUDA graphs (no eager engine, no transformers)")
    parser.add_argument("--hf-static", action="store_true",
                        help="only transformers, with a static cache and its compiled decode step")
    args = parser.parse_args()
    overlap = "off" if load_env().disable_overlap_scheduling else "on"
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}; Qwen3-0.6B random bf16 weights, prompts of "
          f"{args.prompt_len} tokens, {args.steps} decode steps (HF: {args.hf_steps}), overlap "
          f"scheduling {overlap}", flush=True)
    folder = random_qwen3_folder()
    if args.hf_static:
        return hf_static(folder, args.batch_sizes, args.prompt_len, args.hf_steps)
    max_bs = max(args.batch_sizes)
    ours: dict[str, dict[int, float]] = {}
    replay_ms: dict[int, float] = {}
    runs = (("CUDA graphs", None),) if args.graphs_only else (("CUDA graphs", None), ("eager", 0))
    for label, graph_max_bs in runs:
        llm = LLM(folder, dtype="bfloat16", device=DEVICE, attention_backend="triton",
                  cuda_graph_max_bs=graph_max_bs, max_running_reqs=max_bs, page_size=16,
                  num_pages=max_bs * (args.prompt_len + args.steps + 16) // 16 + 64)
        ms_per_decode_step(llm, random_prompts(2, args.prompt_len, seed=0), steps=8)  # warm-up
        ours[label] = {}
        for bs in args.batch_sizes:
            events = replay_timer(llm) if graph_max_bs is None else []
            ours[label][bs] = ms_per_decode_step(llm, random_prompts(bs, args.prompt_len, bs),
                                                 args.steps)
            note = ""
            if events:
                torch.cuda.synchronize()
                replay_ms[bs] = statistics.median(s.elapsed_time(e) for s, e in events)
                note = f" (median replay GPU time {replay_ms[bs]:.3f} ms)"
            print(f"minisgl ({label}) batch {bs:3d}: {ours[label][bs]:7.3f} ms/step{note}",
                  flush=True)
        llm.shutdown()
        del llm
    if args.graphs_only:
        report_target(ours, args.batch_sizes)
        return 0
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(DEVICE).eval()
    for bs in args.batch_sizes:
        theirs = hf_ms_per_step(hf, random_prompts(bs, args.prompt_len, bs), args.hf_steps)
        graphs, eager = ours["CUDA graphs"][bs], ours["eager"][bs]
        print(f"batch {bs:3d}: minisgl with CUDA graphs {graphs:7.3f} ms/step, eager "
              f"{eager:7.3f} ms/step (graphs {eager / graphs:.1f}x faster), transformers "
              f"generate {theirs:7.3f} ms/step; transformers / minisgl with graphs "
              f"{theirs / graphs:.1f}x", flush=True)
    report_target(ours, args.batch_sizes)
    return 0


def hf_static(folder: str, batch_sizes: list[int], prompt_len: int, steps: int) -> int:
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).to(DEVICE).eval()
    for bs in batch_sizes:
        start = time.perf_counter()
        ms = hf_ms_per_step(hf, random_prompts(bs, prompt_len, bs), steps, static=True)
        print(f"transformers static cache + compile batch {bs:3d}: {ms:7.3f} ms/step (compiling "
              f"and timing took {time.perf_counter() - start:.0f} s)", flush=True)
    return 0


def report_target(ours: dict[str, dict[int, float]], batch_sizes: list[int]) -> None:
    if 1 in batch_sizes:
        met = ours["CUDA graphs"][1] <= TARGET_MS
        print(f"target <= {TARGET_MS} ms/step at batch 1 with CUDA graphs: "
              f"{'met' if met else 'NOT met'} ({ours['CUDA graphs'][1]:.3f} ms)")


if __name__ == "__main__":
    sys.exit(main())
