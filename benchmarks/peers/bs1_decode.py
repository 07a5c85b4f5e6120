"""Decode ms/step through an engine's own `LLM.generate`: this engine or the official mini-sglang.

    python benchmarks/peers/bs1_decode.py --engine minisgl|official [--batch 1] [--model PATH]

The method of DESIGN §12: `--batch` copies of one 32-token prompt of random token ids, greedy,
ignore_eos; a step's time is (t(544 new tokens) - t(32 new tokens)) / 512, so that start-up of a
request (prefill, first token) cancels out; the best of 3 such pairs. Both engines run
Qwen3-0.6B with random bf16 weights (their own random-weight switches) and the same settings
(max_seq_len_override 4096, CUDA graphs up to max(8, batch)); the official engine with its
FlashInfer backend ("fi": its default picks FA3 on Hopper, which needs sgl_kernel).

The official engine needs its python/ folder and FlashInfer first on PYTHONPATH (this engine's
package is also called minisgl; benchmarks/peers/run_peers_gpu.sh sets it). `--model` is a folder
with config.json and tokenizer files (default: this engine's bundled Qwen3-0.6B folder).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

ENGINES = ("minisgl", "official")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=ENGINES, required=True)
    parser.add_argument("--batch", type=int, default=1, help="copies of the prompt (default 1)")
    parser.add_argument("--model", default=None,
                        help="model folder (default: .cache/models/Qwen/Qwen3-0.6B, the bundled "
                             "config and tokenizer)")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--short", type=int, default=32, help="new tokens of the short run")
    parser.add_argument("--long", type=int, default=544, help="new tokens of the long run")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs; the best counts")
    args = parser.parse_args(argv)
    if not 0 < args.short < args.long:
        parser.error("need 0 < --short < --long")
    return args


def engine_kwargs(engine: str, batch: int) -> dict[str, object]:
    """LLM(...) keywords, in the official names (this engine's LLM translates them)."""
    common = {"max_seq_len_override": 4096, "cuda_graph_max_bs": max(8, batch),
              "use_dummy_weight": True}
    if engine == "official":
        return {**common, "attention_backend": "fi"}
    return common


def ms_per_step(t_short: float, t_long: float, short: int, long: int) -> float:
    return (t_long - t_short) / (long - short) * 1000


def result_line(engine: str, batch: int, runs: list[float]) -> str:
    """The line run_peers_gpu.sh's summary reads: the best run and all of them."""
    listed = ", ".join(f"{r:.3f}" for r in runs)
    return f"bs1-decode engine={engine} batch={batch} ms_per_step={min(runs):.3f} runs=[{listed}]"


def load_llm_class(engine: str):
    import dataclasses

    import minisgl
    from minisgl.engine.config import EngineConfig
    from minisgl.llm import LLM

    official = "use_dummy_weight" in {f.name for f in dataclasses.fields(EngineConfig)}
    if official != (engine == "official"):
        sys.exit(f"--engine {engine}, but minisgl at {list(minisgl.__path__)} is "
                 f"{'the official package' if official else 'this repository'}: set PYTHONPATH")
    return LLM


def main() -> int:
    args = parse_args()
    model = args.model or str(Path(os.environ.get("MINISGL_CACHE_DIR", ".cache")) / "models" /
                              "Qwen" / "Qwen3-0.6B")
    llm_class = load_llm_class(args.engine)
    from minisgl.core import SamplingParams  # the engine's own class (same fields in both)

    kwargs = engine_kwargs(args.engine, args.batch)
    print(f"engine {args.engine}, model {model}, LLM keywords {kwargs}", flush=True)
    llm = llm_class(model, **kwargs)
    prompt = [random.Random(0).randrange(1, 10000) for _ in range(args.prompt_len)]
    prompts = [list(prompt) for _ in range(args.batch)]

    def generate(new_tokens: int) -> float:
        params = SamplingParams(temperature=0.0, ignore_eos=True, max_tokens=new_tokens)
        start = time.perf_counter()
        results = llm.generate(prompts, params)
        elapsed = time.perf_counter() - start
        # the official LLM leaves out a last token that happens to be EOS
        short = [len(r["token_ids"]) for r in results if len(r["token_ids"]) < new_tokens - 1]
        if short:
            sys.exit(f"asked {new_tokens} new tokens, got {short}")
        return elapsed

    generate(args.short)  # warm-up: JIT builds, Triton compiles, the prefix enters the cache
    runs = []
    for _ in range(args.rounds):
        t_short, t_long = generate(args.short), generate(args.long)
        runs.append(ms_per_step(t_short, t_long, args.short, args.long))
        print(f"t({args.short} new) {t_short:.3f} s, t({args.long} new) {t_long:.3f} s: "
              f"{runs[-1]:.3f} ms/step", flush=True)
    print(result_line(args.engine, args.batch, runs), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
