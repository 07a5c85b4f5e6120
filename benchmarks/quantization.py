"""Weight quantization (chapter 26): memory, accuracy and speed of int8 / fp8 against the
unquantized model, every variant in one run.

    python benchmarks/quantization.py                     # CPU: bundled SmolLM2, fp32 vs int8
    python benchmarks/quantization.py --device cuda --dtype bfloat16 --model Qwen/Qwen3-0.6B \
        --dummy-weight --variants none,int8,fp8 --official     # the GPU call of issue 36

Printed, one line each (the chapter page quotes them):
- `weights <variant>`: bytes of the model's parameters and buffers (scales included; a tied LM
  head shares the embedding's) and the ratio to the unquantized model; `kv pages`: the KV pool the
  engine sized (on a GPU from the memory left after loading).
- `perplexity <variant>`: of tests/data/pride_and_prejudice.txt (real weights only), one forward;
  `agreement <variant>`: greedy tokens equal to the unquantized model's, position by position, over
  the first 16 tokens of 8 chat prompts (real weights only).
- `decode <variant> bs <B>`: ms per decode step, (t(1 + N tokens) - t(1 token)) / N for a batch of
  B copies of one prompt, so the prefill is left out. Each time is the best of --repeat runs
  (the run least disturbed by other work on a shared machine; the median is printed beside it),
  the variants interleaved run by run. The ratio is the unquantized time over this one.
- `official <variant>` (--official): the official bench.py workload (minisgl.benchmark.offline),
  output tokens per second.
- `--alternatives` (CPU): every way this torch offers to multiply the model's decoder projections
  for one token, timed over all of them (each layer its own weight, so they come from memory as
  in a decode step), and the accuracy of fbgemm's plain 8-bit activations on the real model:
  why the engine runs fbgemm on two 7-bit rows (ops/quant_cpu.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.ops import INT8
from minisgl.quant.model import weight_bytes
from minisgl.utils.hf import resolve_model

ROOT = Path(__file__).resolve().parent.parent
PASSAGE = ROOT / "tests" / "data" / "pride_and_prejudice.txt"
sys.path.insert(0, str(ROOT / "tests"))
from conftest import CHAT_PROMPTS  # noqa: E402

PROMPT = "The history of the printing press begins in the fifteenth century, when"


def sync(llm: LLM) -> None:
    if llm.scheduler.engine.device.type == "cuda":
        torch.cuda.synchronize()


def timed(llm: LLM, batch: int, tokens: int) -> float:
    """Seconds to generate `tokens` tokens for `batch` copies of PROMPT, prefill included."""
    llm.scheduler.flush_cache()  # every run computes its prompt
    params = SamplingParams(max_tokens=tokens, ignore_eos=True)
    sync(llm)
    start = time.perf_counter()
    llm.generate([PROMPT] * batch, params, use_tqdm=False)
    sync(llm)
    return time.perf_counter() - start


def perplexity(llm: LLM, text: str) -> float:
    model = llm.scheduler.engine.model
    ids = torch.tensor(llm.tokenizer.encode(text), device=llm.scheduler.engine.device)
    logits = model.forward(ids, torch.arange(len(ids), device=ids.device))
    nll = torch.nn.functional.cross_entropy(logits[:-1].float(), ids[1:])
    return float(nll.exp())


def greedy(llm: LLM, prompts: list[list[int]]) -> list[list[int]]:
    params = SamplingParams(max_tokens=16, ignore_eos=True)
    return [r["token_ids"] for r in llm.generate(prompts, params, use_tqdm=False)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--dummy-weight", action="store_true")
    p.add_argument("--variants", default="none,int8", help="comma-separated: none, int8, fp8")
    p.add_argument("--batch-sizes", default="1",
                   help="comma-separated decode batch sizes (empty: no decode timing)")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--alternatives", action="store_true",
                   help="CPU: time the int8 kernels torch offers, and fbgemm's 8-bit activations")
    p.add_argument("--official", action="store_true",
                   help="also the official bench.py workload, one LLM at a time")
    p.add_argument("--official-only", action="store_true",
                   help="only the official workload (no engines side by side first)")
    args = p.parse_args()
    variants = args.variants.split(",")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.official_only:
        official(args, variants)
        return
    model = str(resolve_model(args.model, dummy_weight=args.dummy_weight))
    base = dict(dtype=args.dtype, device=args.device, dummy_weight=args.dummy_weight,
                max_seq_len=1024, max_running_reqs=64, seed=0)
    if args.device == "cpu":
        base["num_pages"] = 16384
    else:
        base["memory_ratio"] = 0.3  # two or three engines side by side on one GPU
    print(f"model {args.model} ({'random' if args.dummy_weight else 'real'} weights), "
          f"{args.dtype} on {args.device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    llms = {}
    for v in variants:
        llms[v] = LLM(model, **base, quantization=None if v == "none" else v)
        sync(llms[v])
    # On a CPU the engine packs its weights (oneDNN, fbgemm: opaque objects), so the bytes are
    # counted on a model loaded the same way but left unpacked.
    sizes = {v: model_bytes(model, args, v) if args.device == "cpu"
             else weight_bytes(llm.scheduler.engine.model) for v, llm in llms.items()}
    for v, llm in llms.items():
        print(f"weights {v:<5} {sizes[v] / 2**20:8.1f} MiB  ratio "
              f"{sizes[v] / sizes[variants[0]]:.3f}  kv pages {llm.scheduler.engine.num_pages}",
              flush=True)
    if not args.dummy_weight:
        text = PASSAGE.read_text(encoding="utf-8")
        ppl = {v: perplexity(llm, text) for v, llm in llms.items()}
        chat = [llms[variants[0]].tokenizer.apply_chat_template([{"role": "user", "content": q}])
                for q in CHAT_PROMPTS[:8]]
        outs = {v: greedy(llm, chat) for v, llm in llms.items()}
        for v in variants:
            same = sum(a == b for x, y in zip(outs[v], outs[variants[0]]) for a, b in zip(x, y))
            print(f"perplexity {v:<5} {ppl[v]:8.3f}  ratio {ppl[v] / ppl[variants[0]]:.4f}  "
                  f"agreement {same}/{16 * len(chat)} greedy tokens", flush=True)
    for batch in [int(b) for b in args.batch_sizes.split(",") if b]:
        for llm in llms.values():  # warm-up: kernels compiled, graphs captured, caches filled
            timed(llm, batch, 4)
        ones, manys = {v: [] for v in variants}, {v: [] for v in variants}
        for _ in range(args.repeat):
            for v, llm in llms.items():
                ones[v].append(timed(llm, batch, 1))
                manys[v].append(timed(llm, batch, 1 + args.tokens))

        best = {v: step_ms(ones[v], manys[v], args.tokens, min) for v in variants}
        median = {v: step_ms(ones[v], manys[v], args.tokens, statistics.median)
                  for v in variants}
        first = variants[0]
        for v in variants:
            print(f"decode {v:<5} bs {batch:<3} {best[v]:8.3f} ms/step  ratio "
                  f"{best[first] / best[v]:.2f}x  (median {median[v]:.3f} ms/step, ratio "
                  f"{median[first] / median[v]:.2f}x)", flush=True)
    if args.alternatives:
        alternatives(model, llms, variants, args.repeat)
    for llm in llms.values():
        llm.shutdown()
    del llms
    if args.official:
        official(args, variants)


def step_ms(ones: list[float], manys: list[float], tokens: int, pick) -> float:
    """ms per decode step from the runs of 1 and of 1 + tokens tokens (best or median of each)."""
    return (pick(manys) - pick(ones)) / tokens * 1000


def fbgemm_8bit(x: torch.Tensor, weight, scale: torch.Tensor, bias) -> torch.Tensor:
    """fbgemm as it is: the activations rounded to 7 bits (reduce_range), one range per call."""
    y = torch.ops.quantized.linear_dynamic(x.reshape(-1, x.shape[-1]).float(), weight, True)
    return (y if bias is None else y + bias).to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])


@contextmanager
def eight_bit_activations():
    """The registry's fbgemm implementation of linear_int8 swapped for fbgemm_8bit meanwhile."""
    saved = INT8.linear.faster
    INT8.linear.faster = [replace(i, fn=fbgemm_8bit) if i.kind == "fbgemm" else i for i in saved]
    try:
        yield
    finally:
        INT8.linear.faster = saved


def alternatives(model: str, llms: dict, variants: list[str], repeat: int) -> None:
    from minisgl.models.weight import load_model
    from minisgl.ops.quant_cpu import linear_int8_fbgemm, pack_int8
    from minisgl.quant.model import QUANTIZED_LAYERS, sub_ops
    from minisgl.quant.quantize import quantize_int8

    weights = [op.weight for op in sub_ops(load_model(model)) if isinstance(op, QUANTIZED_LAYERS)]
    xs = [torch.randn(1, w.shape[1]) for w in weights]
    int8 = [quantize_int8(w) for w in weights]
    packed = [torch.ops.mkldnn._reorder_linear_weight(w, 32) for w in weights]
    fbgemm = [pack_int8(q, s) for q, s in int8]
    kernels = {
        "fp32 F.linear": lambda i: F.linear(xs[i], weights[i]),
        "fp32 oneDNN, packed (the engine's fp32)":
            lambda i: torch.ops.mkldnn._linear_pointwise(xs[i], packed[i], None, "none", [], ""),
        "int8 torch._weight_int8pack_mm":
            lambda i: torch._weight_int8pack_mm(xs[i], int8[i][0], int8[i][1]),
        "int8 dequantized copy + F.linear": lambda i: F.linear(xs[i], int8[i][0].float())
            * int8[i][1],
        "int8 fbgemm, 8-bit activations": lambda i: fbgemm_8bit(xs[i], fbgemm[i], None, None),
        "int8 fbgemm, two 7-bit rows (the engine's int8)":
            lambda i: linear_int8_fbgemm(xs[i], fbgemm[i], int8[i][1], None),
    }
    print(f"one token through the {len(weights)} decoder projections, best of {repeat}:")
    for name, kernel in kernels.items():
        def run(kernel=kernel) -> None:
            for i in range(len(weights)):
                kernel(i)

        run()
        best = min(timed_call(run) for _ in range(repeat))
        print(f"  kernel {name:<48} {best * 1000:8.2f} ms", flush=True)
    if "int8" in llms:
        with eight_bit_activations():
            text = PASSAGE.read_text(encoding="utf-8")
            ppl = perplexity(llms["int8"], text)
            base = llms[variants[0]]
            chat = [base.tokenizer.apply_chat_template([{"role": "user", "content": q}])
                    for q in CHAT_PROMPTS[:8]]
            got, want = greedy(llms["int8"], chat), greedy(base, chat)
            same = sum(a == b for x, y in zip(got, want) for a, b in zip(x, y))
            print(f"perplexity int8-a8 {ppl:8.3f}  ratio {ppl / perplexity(base, text):.4f}  "
                  f"agreement {same}/{16 * len(chat)} greedy tokens (fbgemm's 8-bit "
                  f"activations)", flush=True)


def timed_call(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def model_bytes(model: str, args: argparse.Namespace, variant: str) -> int:
    from minisgl.models.weight import load_model

    loaded = load_model(model, dtype=getattr(torch, args.dtype), device=args.device,
                        dummy_weight=args.dummy_weight,
                        quantization=None if variant == "none" else variant)
    return weight_bytes(loaded)


def official(args: argparse.Namespace, variants: list[str]) -> None:
    from minisgl.benchmark.offline import (
        OFFICIAL_ENGINE,
        OFFICIAL_MODEL,
        official_workload,
        run_minisgl,
    )

    work = official_workload()
    for v in variants:
        llm = LLM(OFFICIAL_MODEL, dtype=args.dtype, device=args.device, dummy_weight=True,
                  quantization=None if v == "none" else v, **OFFICIAL_ENGINE)
        seconds = run_minisgl(llm, work)
        print(f"official {v:<5} {work.output_tokens / seconds:10.1f} tok/s  ({seconds:.2f} s, "
              f"{work.output_tokens} output tokens, kv pages {llm.scheduler.engine.num_pages})",
              flush=True)
        llm.shutdown()
        del llm
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
