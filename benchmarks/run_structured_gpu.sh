#!/usr/bin/env bash
# Chapter 25 (structured output) on one GPU, in one command of at most ~9 min:
#
#   COMMIT=<hash> OUT=$OUT bash benchmarks/run_structured_gpu.sh     # carry .cache/wheels,
#                                                                    # .cache/models/Qwen
# 1. the chapter-25 tests marked gpu: XGrammar's Triton mask kernel against the torch reference
#    at Qwen3's vocabulary, and Qwen3-0.6B (random bf16 weights, CUDA graphs, overlap) whose 16
#    answers (JSON schema, regex, EBNF, free) all match their grammars;
# 2. benchmarks/structured.py on Qwen3-0.6B with random bf16 weights: decode ms per step of a
#    batch under a JSON schema against the same batch free, batch 1, 16 and 64, and the compile
#    time of the schema against Qwen3's vocabulary.
# Writes $OUT/<step>.txt and $OUT/summary.txt.
set -u
OUT=${OUT:-/tmp/structured}
BUDGET_S=${BUDGET_S:-540}
source "$(dirname "$0")/gpu_steps.sh"

step test_ch25_gpu 200 python -m pytest -q -p no:cacheprovider -rs -m gpu \
  tests/test_ch25_structured.py
step structured_gpu 300 python benchmarks/structured.py --device cuda --dtype bfloat16 \
  --model Qwen/Qwen3-0.6B --dummy-weight --batch-sizes 1,16,64 --tokens 128 --repeat 5

{ echo "$MACHINE"; echo "+++ [$SECONDS s] summary"
  grep -H -E "passed|failed|error|ms/step|compile|TIMED OUT|exit status" \
    "$OUT"/test_ch25_gpu.txt "$OUT"/structured_gpu.txt; } 2>&1 | tee "$OUT/summary.txt"
