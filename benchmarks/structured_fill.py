"""Structured output (chapter 25): host time to fill the token bitmasks of a batch, one matcher
after another against XGrammar's BatchGrammarMatcher (a pool of threads), and to apply them.

    python benchmarks/structured_fill.py [--model Qwen/Qwen3-0.6B] [--batch-sizes 1,16,64]

Matchers are advanced into the middle of a JSON string of benchmarks/structured.py's schema (the
state a long answer spends most of its tokens in), then each fill is timed (median of 20).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from minisgl import ops
from minisgl.grammar.compiler import GrammarCompiler
from minisgl.grammar.spec import GrammarKey
from minisgl.models.config import ModelConfig
from minisgl.utils.hf import resolve_model
sys.path.insert(0, str(Path(__file__).resolve().parent))
from structured import RECORDS  # noqa: E402


def median_ms(fn, repeat: int = 20) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> None:
    import xgrammar as xgr

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="Qwen/Qwen3-0.6B")
    ap.add_argument("--batch-sizes", default="1,16,64")
    args = ap.parse_args()
    path = str(resolve_model(args.model, dummy_weight=True))
    mc = ModelConfig.from_path(path)
    compiler = GrammarCompiler(path, mc.vocab_size, mc.eos_token_ids)
    compiled = compiler.compile(GrammarKey("json_schema", json.dumps(RECORDS))).result()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"model {args.model}: vocabulary {mc.vocab_size}; {os.cpu_count()} CPUs; {device}")
    for threads in ("auto", 1, 4, 8):
        pool = xgr.BatchGrammarMatcher(max_threads=threads)
        for batch in [int(b) for b in args.batch_sizes.split(",")]:
            matchers = [xgr.GrammarMatcher(compiled) for _ in range(batch)]
            for m in matchers:
                assert m.accept_string('{"records": [{"id": 12, "name": "ab')
            host = torch.full((batch, (mc.vocab_size + 31) // 32), -1, dtype=torch.int32)
            rows = list(range(batch))

            def one_by_one() -> None:
                for i, m in enumerate(matchers):
                    m.fill_next_token_bitmask(host, i)

            seq = median_ms(one_by_one) if threads == "auto" else float("nan")
            par = median_ms(lambda: pool.batch_fill_next_token_bitmask(matchers, host, rows))
            logits = torch.randn(batch, mc.vocab_size, device=device, dtype=torch.bfloat16)

            def apply() -> None:
                ops.apply_token_bitmask(logits, host.to(device, non_blocking=True))
                if device == "cuda":
                    torch.cuda.synchronize()

            print(f"threads {threads!s:>4} batch {batch:>3}  one by one {seq:7.3f} ms  "
                  f"batch fill {par:7.3f} ms  copy + apply {median_ms(apply):7.3f} ms")
    compiler.shutdown()


if __name__ == "__main__":
    main()
