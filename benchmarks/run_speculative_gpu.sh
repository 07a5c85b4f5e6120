#!/usr/bin/env bash
# Chapter 24 (speculative decoding) on one GPU, in one command of at most ~9 min:
#
#   COMMIT=<hash> OUT=$OUT bash benchmarks/run_speculative_gpu.sh     # carry .cache/wheels
#
# 1. the chapter-24 tests on CUDA (the tiny Qwen3's scripts with Triton attention and the draft's
#    CUDA graphs, SmolLM2 fp32 on the GPU, the server);
# 2. benchmarks/speculative.py on Qwen3-0.6B with random bf16 weights: batch-1 ms per output
#    token, plain against NGRAM, the target as its own draft, and a 2-layer truncation of the
#    target as the draft (same embedding and tied LM head), with acceptance.
# Writes $OUT/<step>.txt and $OUT/summary.txt.
set -u
OUT=${OUT:-/tmp/speculative}
BUDGET_S=${BUDGET_S:-540}
source "$(dirname "$0")/gpu_steps.sh"

step test_ch24_gpu 200 python -m pytest -q -p no:cacheprovider -rs tests/test_ch24_speculative.py
step speculative_gpu 300 python benchmarks/speculative.py --device cuda --dtype bfloat16 \
  --model Qwen/Qwen3-0.6B --dummy-weight --draft-layers 2 --tokens 128 --repeat 3

{ echo "$MACHINE"; echo "+++ [$SECONDS s] summary"
  grep -H -E "passed|failed|error|ms/token|draft weights|TIMED OUT|exit status" \
    "$OUT"/test_ch24_gpu.txt "$OUT"/speculative_gpu.txt; } 2>&1 | tee "$OUT/summary.txt"
