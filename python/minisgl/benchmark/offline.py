"""Offline throughput: random token prompts with random input and output lengths, ignore_eos.

    python -m minisgl.benchmark.offline --num-requests 32 --input-len 16 256 \
        --output-len 16 128 --compare-hf
    python -m minisgl.benchmark.offline --official [--compare-hf] [--profile]

With --compare-hf, Hugging Face transformers generates the same requests in the same process
(one left-padded batch) and the ratio of the two throughputs is printed; with --repeat N the two
run in N interleaved rounds and the median ratio is printed, which steadies the figure on a noisy
machine. Only the tokens each request asked for count as output for both: HF's static batch keeps
generating for rows that are already done, which is exactly the waste continuous batching avoids.

--official (chapter 16) is the official mini-sglang benchmark/offline/bench.py workload, drawn the
same way (Python's random, seed 0): 256 requests of 100-1024 random token ids (0-10000) with
100-1024 output tokens each (133,966 in all), temperature 0.6, ignore_eos, on Qwen/Qwen3-0.6B with
random weights and bench.py's engine settings (page_size 256, max_seq_len 4096, max_extend_tokens
16384, cuda_graph_max_bs 256). HF generating all of it takes minutes, so by default it runs every
request but only --hf-steps new tokens, and its time is extended linearly to the longest output
(which flatters HF: its later steps attend over longer caches). --num-requests and --scale-lengths
shrink the workload (for a CPU). --profile records a steady stretch of decode steps with
torch.profiler and prints how busy the GPU was (kernel time union / wall time) and the host time
per step.
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

# The official bench.py: its model, engine settings and sampling.
OFFICIAL_MODEL = "Qwen/Qwen3-0.6B"
OFFICIAL_ENGINE = dict(max_seq_len_override=4096, max_extend_tokens=16384, cuda_graph_max_bs=256,
                       page_size=256)
OFFICIAL_TEMPERATURE = 0.6


@dataclass(frozen=True)
class Workload:
    prompts: list[list[int]]
    output_lens: list[int]
    temperature: float = 0.0  # 0: greedy

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


def official_workload(num_requests: int = 256, scale: float = 1.0) -> Workload:
    """bench.py's requests, drawn in its order from Python's random seeded with 0; the first
    num_requests of them, with every length scaled (at least 1 token) when scale < 1."""
    rng = random.Random(0)
    prompts = [[rng.randint(0, 10000) for _ in range(rng.randint(100, 1024))]
               for _ in range(256)]
    output_lens = [rng.randint(100, 1024) for _ in range(256)]

    def scaled(n: int) -> int:
        return max(1, round(n * scale))

    prompts = [p[: scaled(len(p))] for p in prompts[:num_requests]]
    return Workload(prompts, [scaled(n) for n in output_lens[:num_requests]],
                    OFFICIAL_TEMPERATURE)


def params_for(work: Workload) -> list[SamplingParams]:
    return [SamplingParams(temperature=work.temperature, max_tokens=n, ignore_eos=True)
            for n in work.output_lens]


def warm_up(llm: LLM) -> None:
    warmup = SamplingParams(max_tokens=2, ignore_eos=True)  # a prefill and a decode step
    llm.generate([[1, 2, 3, 4]] * 2, warmup, use_tqdm=False)
    llm.scheduler.flush_cache()  # no prefix hits from the warm-up: HF gets none either


def run_minisgl(llm: LLM, work: Workload, progress: bool = False) -> float:
    warm_up(llm)
    start = time.perf_counter()
    results = llm.generate(work.prompts, params_for(work), use_tqdm=progress)  # a bar per round
    elapsed = time.perf_counter() - start
    got = [len(r["token_ids"]) for r in results]
    if got != work.output_lens:
        raise RuntimeError("minisgl produced a different number of tokens than asked for")
    llm.scheduler.flush_cache()
    return elapsed


def load_hf(model_dir: str, dtype: torch.dtype, device: str, dummy_weight: bool):
    from transformers import AutoConfig, AutoModelForCausalLM

    if dummy_weight:  # random weights too: the speed of the architecture is what is compared
        config = AutoConfig.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    else:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
    return model.to(device).eval()


@dataclass(frozen=True)
class HFTime:
    seconds: float
    note: str = ""  # how the time was obtained, when not by generating everything


def run_hf(model, work: Workload, device: str, steps: int = 0) -> HFTime:
    """HF generate over the whole workload as one left-padded batch. steps > 0: generate only
    1 and 1 + steps new tokens and extend the per-step time linearly to the longest output."""
    from transformers import GenerationConfig

    longest = max(len(p) for p in work.prompts)
    pad = 0
    ids = torch.tensor([[pad] * (longest - len(p)) + p for p in work.prompts], device=device)
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in work.prompts],
                        device=device)
    sampling = dict(do_sample=True, temperature=work.temperature, top_k=0, top_p=1.0) \
        if work.temperature > 0 else dict(do_sample=False)

    def generate(rows: slice, new_tokens: int) -> float:
        config = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                                  eos_token_id=None, pad_token_id=pad, **sampling)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            model.generate(ids[rows], attention_mask=mask[rows], generation_config=config)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start

    generate(slice(0, 2), 2)  # warm-up
    longest_output = max(work.output_lens)
    if steps <= 0 or steps + 1 >= longest_output:
        return HFTime(generate(slice(None), longest_output))
    first = generate(slice(None), 1)
    per_step = (generate(slice(None), 1 + steps) - first) / steps
    return HFTime(first + (longest_output - 1) * per_step,
                  f"HF generated {steps + 1} of {longest_output} tokens per request; its time "
                  f"is extended linearly, which flatters it")


@dataclass(frozen=True)
class DecodeProfile:
    steps: int
    batch_size: int
    wall_ms: float  # of the whole stretch
    gpu_busy: float | None  # union of GPU kernel time / wall time (None without a GPU)
    host_ms_per_step: float  # time the host spent per step, not counting waits for the GPU
    table: str  # torch.profiler's top operators


def profile_decode(llm: LLM, work: Workload, steps: int, trace: str | None = None
                   ) -> DecodeProfile:
    """Run the workload until every request is prefilled and decoding, then record `steps`
    decode steps with torch.profiler; the rest of the workload is then finished normally.
    trace: also write the recorded stretch as a Chrome trace (.json or .json.gz) there."""
    from torch.profiler import ProfilerActivity, profile, record_function

    sched = llm.scheduler
    for prompt, params in zip(work.prompts, params_for(work)):
        sched.add_request(prompt, params)
    while sched.prefill.runnable:  # prefill (and the first decode steps) until all are running
        sched.step()
    sched.step()
    batch_size = len(sched.decode.running)
    cuda = sched.engine.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        with record_function("decode_stretch"):
            for _ in range(steps):
                sched.step()
            if cuda:
                torch.cuda.synchronize()
    while sched.has_work:
        sched.step()
    sched.flush_cache()
    if trace:
        prof.export_chrome_trace(trace)
    events = prof.events()
    window = next(e for e in events if e.name == "decode_stretch").time_range
    wall_us = window.end - window.start
    waits = sum(e.cpu_time_total for e in events
                if e.name in ("cudaEventSynchronize", "cudaStreamSynchronize",
                              "cudaDeviceSynchronize"))
    gpu_busy = None
    if cuda:
        # Kernels and copies only: record_function's range also shows on the GPU's timeline, as
        # one annotation from the first to the last kernel of the stretch, and counting it made
        # the GPU look busy 99% of the time whatever it did.
        spans = sorted((max(e.time_range.start, window.start), min(e.time_range.end, window.end))
                       for e in events if e.device_type.name == "CUDA"
                       and e.name != "decode_stretch" and not getattr(e, "is_user_annotation",
                                                                      False))
        busy, end = 0.0, window.start
        for a, b in spans:  # length of the union of the kernels' intervals
            if b > end:
                busy += b - max(a, end)
                end = b
        gpu_busy = busy / wall_us
    sort = "cuda_time_total" if cuda else "cpu_time_total"
    return DecodeProfile(steps, batch_size, wall_us / 1000, gpu_busy,
                         (wall_us - waits) / 1000 / steps,
                         prof.key_averages().table(sort_by=sort, row_limit=15))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None,
                        help="default: HuggingFaceTB/SmolLM2-135M-Instruct, or with --official "
                             f"{OFFICIAL_MODEL} (random weights)")
    parser.add_argument("--official", action="store_true",
                        help="the official bench.py workload and engine settings")
    parser.add_argument("--num-requests", type=int, default=None, help="default 32 (official 256)")
    parser.add_argument("--scale-lengths", type=float, default=1.0,
                        help="--official: multiply every input and output length by this")
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
    parser.add_argument("--hf-steps", type=int, default=None,
                        help="HF generates this many tokens per request and its time is "
                             "extended (default: 64 with --official, else all; 0: all)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds of (minisgl, transformers); the median ratio is printed")
    parser.add_argument("--profile", action="store_true",
                        help="profile a steady stretch of decode steps (after the rounds)")
    parser.add_argument("--profile-steps", type=int, default=50)
    parser.add_argument("--profile-trace", default=None,
                        help="with --profile: write a Chrome trace of the stretch (.json[.gz])")
    args = parser.parse_args(argv)
    if args.scale_lengths <= 0 or args.scale_lengths > 1:
        parser.error("--scale-lengths must be in (0, 1]")
    if args.num_requests is not None and not 1 <= args.num_requests <= \
            (256 if args.official else 1 << 20):
        parser.error("--num-requests must be >= 1 (at most 256 with --official)")

    if args.official:
        model = args.model or OFFICIAL_MODEL
        dummy = args.dummy_weight or args.model is None
        llm = LLM(model, dtype=args.dtype, dummy_weight=dummy, memory_ratio=args.memory_ratio,
                  **OFFICIAL_ENGINE)
        work = official_workload(args.num_requests or 256, args.scale_lengths)
        hf_steps = 64 if args.hf_steps is None else args.hf_steps
    else:
        model = args.model or "HuggingFaceTB/SmolLM2-135M-Instruct"
        dummy = args.dummy_weight
        llm = LLM(model, dtype=args.dtype, page_size=args.page_size, dummy_weight=dummy,
                  memory_ratio=args.memory_ratio)
        mc = llm.scheduler.engine.model_config
        work = make_workload(args.num_requests or 32, args.input_len, args.output_len,
                             min(mc.vocab_size, llm.tokenizer.vocab_size), args.seed)
        hf_steps = args.hf_steps or 0
    mc = llm.scheduler.engine.model_config
    device, dtype = str(llm.scheduler.engine.device), llm.scheduler.config.dtype
    overlap = "on" if llm.scheduler.overlap else "off"
    print(f"{len(work.prompts)} requests, {work.input_tokens} input and {work.output_tokens} "
          f"output tokens, temperature {work.temperature}, {mc.architecture} on {device} "
          f"({str(dtype).removeprefix('torch.')}{', random weights' if dummy else ''}), "
          f"overlap scheduling {overlap}", flush=True)
    peer = None
    if args.compare_hf:
        print("loading the transformers model for comparison", flush=True)
        peer = load_hf(str(resolve_model(model, dummy_weight=dummy)), dtype, device, dummy)
    ours_s: list[float] = []
    theirs: list[HFTime] = []
    for round_ in range(1, args.repeat + 1):  # interleaved, so both see the same machine state
        print(f"round {round_}/{args.repeat}: minisgl generates {len(work.prompts)} requests",
              flush=True)
        ours_s.append(run_minisgl(llm, work, progress=True))
        line = (f"round {round_}/{args.repeat}: minisgl {ours_s[-1]:7.2f} s "
                f"({work.output_tokens / ours_s[-1]:8.1f} tok/s)")
        if peer is not None:
            print(f"round {round_}/{args.repeat}: transformers generates them as one padded batch "
                  "(a single call: no progress bar)", flush=True)
            theirs.append(run_hf(peer, work, device, hf_steps))
            line += (f", transformers {theirs[-1].seconds:7.2f} s "
                     f"({work.output_tokens / theirs[-1].seconds:8.1f} tok/s), "
                     f"speedup {theirs[-1].seconds / ours_s[-1]:.2f}x")
        print(line, flush=True)
    print_table(work, ours_s, theirs)
    if args.profile:
        prof = profile_decode(llm, work, args.profile_steps, args.profile_trace)
        busy = "n/a (no GPU)" if prof.gpu_busy is None else f"{prof.gpu_busy:.1%}"
        print(f"profile: {prof.steps} decode steps of batch {prof.batch_size} "
              f"(overlap scheduling {overlap}): {prof.wall_ms / prof.steps:.3f} ms/step, "
              f"GPU busy {busy} of wall time, host {prof.host_ms_per_step:.3f} ms/step "
              f"outside waits for the GPU")
        print(prof.table)
    llm.shutdown()


def print_table(work: Workload, ours_s: list[float], theirs: list[HFTime]) -> None:
    ours = statistics.median(ours_s)
    rows = [("minisgl", ours, "")]
    if theirs:
        hf = statistics.median(t.seconds for t in theirs)
        rows.append(("transformers", hf, theirs[0].note))
    print(f"\n{'engine':14s} {'output tokens':>13s} {'time (s)':>9s} {'tok/s':>9s}  note")
    for name, seconds, note in rows:
        print(f"{name:14s} {work.output_tokens:13d} {seconds:9.2f} "
              f"{work.output_tokens / seconds:9.1f}  {note}")
    if theirs:
        ratios = [t.seconds / o for t, o in zip(theirs, ours_s)]
        print(f"speedup over transformers (median of {len(ratios)}): "
              f"{statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
