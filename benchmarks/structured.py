"""Structured output (chapter 25): what a grammar costs. Decode throughput of a batch whose
requests follow a JSON schema against the same batch free, in one run, and the time to compile
a typical schema against the model's vocabulary.

    python benchmarks/structured.py                      # CPU: bundled SmolLM2, fp32
    python benchmarks/structured.py --device cuda --model Qwen/Qwen3-0.6B --dummy-weight \
        --batch-sizes 1,16,64 --tokens 128               # the H200 call of issue 35

Both runs of a batch decode the same number of tokens per request: the schema (a list of up to
64 small records) is long enough that no answer closes before --tokens, and the free requests
ignore the end-of-sequence token. Each is timed as (time for 1 + N tokens - time for 1 token),
so the prefill and the compile are left out; median of --repeat runs. Sampling at temperature 1
with a seed per request, so the constrained answers differ from each other.

Compile time: the first compile of the schema on a fresh compiler (vocabulary preparation
excluded, reported apart) and a compile of the same text again (the cache).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from minisgl.core import SamplingParams
from minisgl.grammar import GrammarManager
from minisgl.grammar.compiler import GrammarCompiler
from minisgl.grammar.spec import GrammarKey
from minisgl.llm import LLM
from minisgl.models.config import ModelConfig
from minisgl.utils.hf import resolve_model

RECORDS = {
    "type": "object",
    "properties": {
        "records": {"type": "array", "minItems": 64, "maxItems": 64, "items": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0, "maximum": 999},
                "name": {"type": "string", "maxLength": 16},
                "kind": {"type": "string", "enum": ["book", "film", "song", "game"]},
                "score": {"type": "number", "minimum": 0, "maximum": 10},
                "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                         "maxItems": 3},
            },
            "required": ["id", "name", "kind", "score", "tags"],
            "additionalProperties": False}},
    },
    "required": ["records"],
    "additionalProperties": False,
}
PROMPT = "List 64 records of books, films, songs and games as JSON:"


def decode_ms(llm: LLM, batch: int, tokens: int, constrained: bool, repeat: int
              ) -> tuple[float, int]:
    """Median ms per decode step of the batch, and the tokens the last run produced."""
    def params(n: int, i: int) -> SamplingParams:
        grammar = {"json_schema": json.dumps(RECORDS)} if constrained else {}
        return SamplingParams(temperature=1.0, seed=1000 + i, max_tokens=n,
                              ignore_eos=not constrained, **grammar)

    def run(n: int) -> tuple[float, int]:
        start = time.perf_counter()
        out = llm.generate([PROMPT] * batch, [params(n, i) for i in range(batch)],
                           use_tqdm=False)
        seconds = time.perf_counter() - start
        if any(r["finish_reason"] != "length" for r in out):
            raise RuntimeError("an answer ended before max_tokens: the timing would be unfair")
        return seconds, sum(len(r["token_ids"]) for r in out)

    run(1 + tokens)  # warm-up: compile, graphs, caches
    samples, produced = [], 0
    for _ in range(repeat):
        first, _ = run(1)
        whole, produced = run(1 + tokens)
        samples.append((whole - first) / tokens * 1e3)
    return statistics.median(samples), produced


MASK_MS: list[float] = []  # host time of each GrammarManager.mask_logits call


def timed_masks() -> None:
    """Record the host time of every mask (filling and queueing the apply)."""
    inner = GrammarManager.mask_logits

    def mask_logits(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            MASK_MS.append((time.perf_counter() - start) * 1e3)

    GrammarManager.mask_logits = mask_logits


def compile_times(model_path: str) -> tuple[float, float, float]:
    """Seconds: preparing the vocabulary, the first compile of RECORDS, a cached compile."""
    mc = ModelConfig.from_path(model_path)
    compiler = GrammarCompiler(model_path, mc.vocab_size, mc.eos_token_ids)
    key = GrammarKey("json_schema", json.dumps(RECORDS))
    try:
        start = time.perf_counter()
        compiler.compile(GrammarKey("regex", "a")).result()  # builds the vocabulary description
        vocab = time.perf_counter() - start
        start = time.perf_counter()
        compiler.compile(key).result()
        first = time.perf_counter() - start
        start = time.perf_counter()
        compiler.compile(key).result()
        cached = time.perf_counter() - start
    finally:
        compiler.shutdown()
    return vocab, first, cached


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--dummy-weight", action="store_true")
    ap.add_argument("--batch-sizes", default="1,8")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    timed_masks()
    path = str(resolve_model(args.model, dummy_weight=args.dummy_weight))
    vocab, first, cached = compile_times(path)
    print(f"model {args.model} ({'random' if args.dummy_weight else 'real'} weights), "
          f"{args.dtype} on {args.device}; temperature 1, {args.tokens} tokens after the first, "
          f"median of {args.repeat}")
    print(f"compile vocabulary {vocab * 1e3:.1f} ms  schema first {first * 1e3:.1f} ms  "
          f"schema cached {cached * 1e3:.3f} ms")
    llm = LLM(args.model, dtype=args.dtype, device=args.device, dummy_weight=args.dummy_weight,
              max_seq_len=2048, **({"num_pages": 16384} if args.device == "cpu" else {}))
    for batch in [int(b) for b in args.batch_sizes.split(",")]:
        free, free_tokens = decode_ms(llm, batch, args.tokens, False, args.repeat)
        MASK_MS.clear()
        bound, bound_tokens = decode_ms(llm, batch, args.tokens, True, args.repeat)
        print(f"batch {batch:>3}  free {free:8.3f} ms/step  json_schema {bound:8.3f} ms/step  "
              f"constrained/free throughput {free / bound:.2f}x  tokens {bound_tokens}/"
              f"{free_tokens}  mask host {statistics.median(MASK_MS):.3f} ms/step")
    llm.scheduler.check_integrity()
    llm.shutdown()
    if args.device.startswith("cuda"):
        print(f"device {torch.cuda.get_device_name()}")


if __name__ == "__main__":
    main()
