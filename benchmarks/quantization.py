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
  B copies of one prompt, so the prefill is left out; median of --repeat runs, the variants
  interleaved round by round (a shared machine's noise hits them alike). The ratio is the
  unquantized time over this one.
- `official <variant>` (--official): the official bench.py workload (minisgl.benchmark.offline),
  output tokens per second.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
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
    p.add_argument("--batch-sizes", default="1", help="comma-separated decode batch sizes")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--official", action="store_true",
                   help="also the official bench.py workload, one LLM at a time")
    args = p.parse_args()
    variants = args.variants.split(",")
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
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        for llm in llms.values():  # warm-up: kernels compiled, graphs captured, caches filled
            timed(llm, batch, 4)
        per_step = {v: [] for v in variants}
        for _ in range(args.repeat):
            for v, llm in llms.items():
                one, many = timed(llm, batch, 1), timed(llm, batch, 1 + args.tokens)
                per_step[v].append((many - one) / args.tokens * 1000)
        first = statistics.median(per_step[variants[0]])
        for v in variants:
            ms = statistics.median(per_step[v])
            print(f"decode {v:<5} bs {batch:<3} {ms:8.3f} ms/step  ratio {first / ms:.2f}x  "
                  f"(runs: {', '.join(f'{t:.2f}' for t in per_step[v])})", flush=True)
    for llm in llms.values():
        llm.shutdown()
    del llms
    if args.official:
        official(args, variants)


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
