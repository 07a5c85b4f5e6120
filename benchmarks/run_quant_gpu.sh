#!/usr/bin/env bash
# Chapter 26 (weight quantization) on one GPU with FP8 (an H200), in one command of at most ~8 min:
#
#   COMMIT=<hash> OUT=$OUT bash benchmarks/run_quant_gpu.sh     # carry .cache (models, wheels)
#
# 1. the chapter-26 GPU tests: the int8 kernels in bf16, the fp8 quantizer and torch._scaled_mm,
#    Qwen3-0.6B's logits with int8 / fp8 weights against bf16, the KV pool after quantization;
# 2. benchmarks/quant_gemv.py: each projection of Qwen3-0.6B for one token, bf16 (cuBLAS, the
#    chapter-20 GEMV) against the int8 GEMV (the bf16 tiling and the best of a sweep) and fp8;
# 3. benchmarks/quantization.py: Qwen3-0.6B with random bf16 weights, weights and KV pages per
#    variant, ms per decode step at batch 1 and 64, bf16 / int8 / fp8 in the same run;
# 4. the official bench.py workload (minisgl.benchmark.offline's copy of it) with bf16, fp8, int8;
# 5. the rest of the chapter-26 tests on the GPU machine (the kernels compiled, not interpreted),
#    but those that need the bundled SmolLM2, which the GPU machine may not have prepared.
# Writes $OUT/<step>.txt and $OUT/summary.txt; STEPS="name ..." reruns only the named steps.
set -u
OUT=${OUT:-/tmp/quant}
BUDGET_S=${BUDGET_S:-470}
source "$(dirname "$0")/gpu_steps.sh"
QWEN="--device cuda --dtype bfloat16 --model Qwen/Qwen3-0.6B --dummy-weight"

step test_ch26_gpu 150 python -m pytest -q -p no:cacheprovider -rs -m gpu -s \
  tests/test_ch26_quantization.py
step quant_gemv 90 python benchmarks/quant_gemv.py
step quant_decode 130 python benchmarks/quantization.py $QWEN --variants none,int8,fp8 \
  --batch-sizes 1,64 --tokens 128 --repeat 3
step quant_official 150 python benchmarks/quantization.py $QWEN --variants none,fp8,int8 \
  --official-only
step test_ch26_rest 120 python -m pytest -q -p no:cacheprovider -rs -m "not gpu" \
  -k "not smollm2 and not greedy and not perplexity and not before_loading" \
  tests/test_ch26_quantization.py

{ echo "$MACHINE"; echo "+++ [$SECONDS s] summary"
  grep -H -E "passed|failed|error|relative logit|pages \{|GB/s|^weights|^decode|^official|TIMED OUT|exit status" \
    "$OUT"/test_ch26_gpu.txt "$OUT"/quant_gemv.txt "$OUT"/quant_decode.txt \
    "$OUT"/quant_official.txt "$OUT"/test_ch26_rest.txt; } 2>&1 | tee "$OUT/summary.txt"
