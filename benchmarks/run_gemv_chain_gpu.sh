#!/usr/bin/env bash
# Chapter 26's one-token int8 tiles on a GPU, in one command of at most ~9 min:
#
#   COMMIT=<hash> OUT=$OUT bash benchmarks/run_gemv_chain_gpu.sh     # carry .cache (models, wheels)
#
# 1. benchmarks/gemv_chain.py: each projection of Qwen3-0.6B, 28 layers' weights in a CUDA graph,
#    bf16 and int8 with their tiles now, and a sweep of int8 tiles;
# 2. benchmarks/quantization.py: decode at batch 1 and 64, bf16 against int8 and fp8, with the
#    tiles int8 uses now;
# 3. the chapter-26 GPU tests.
set -u
OUT=${OUT:-/tmp/gemv_chain}
BUDGET_S=${BUDGET_S:-420}
source "$(dirname "$0")/gpu_steps.sh"
step gemv_chain 180 python benchmarks/gemv_chain.py
step quant_decode 130 python benchmarks/quantization.py --device cuda --dtype bfloat16 \
  --model Qwen/Qwen3-0.6B --dummy-weight --variants none,int8,fp8 --batch-sizes 1,64 \
  --tokens 128 --repeat 3
step test_ch26_gpu 90 python -m pytest -q -p no:cacheprovider -rs -m gpu -s \
  tests/test_ch26_quantization.py
{ echo "$MACHINE"; echo "+++ [$SECONDS s] summary"
  grep -H -E "best-int8|^decode|^weights|passed|failed|TIMED OUT|exit status" \
    "$OUT"/gemv_chain.txt "$OUT"/quant_decode.txt "$OUT"/test_ch26_gpu.txt; } 2>&1 | tee "$OUT/summary.txt"
