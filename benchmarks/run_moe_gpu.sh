#!/usr/bin/env bash
# Chapter 18 (Mixture of Experts) on one GPU, in one command of at most ~8 min:
#
#   bash benchmarks/run_moe_gpu.sh
#
# Needs the bundled Qwen3 folders in .cache/models/Qwen (Qwen3-0.6B's tokenizer and the
# Qwen3-30B-A3B config, 18 MB; make them here with
# `python -c "from minisgl.utils.offline import prepare_qwen3_moe as p; p()"` and
# `mkdir -p .cache/models && cp -r ~/.cache/minisgl/models/Qwen .cache/models/`, and carry .cache).
# Writes $OUT/<step>.txt for each step (OUT defaults to /tmp/moe) and a summary. Every step has a
# time limit, and a failing or timed-out step does not stop the ones after it.
set -u
OUT=${OUT:-/tmp/moe}
BUDGET_S=${BUDGET_S:-470}  # the whole script (override in the environment); each step also gets at most what is left
source "$(dirname "$0")/gpu_steps.sh"
[ -d .cache/models/Qwen/Qwen3-30B-A3B ] || echo "WARNING: .cache/models/Qwen/Qwen3-30B-A3B is missing: the model step will fail"

# 1. The chapter-18 tests on CUDA: fused vs torch at the real expert shapes (fp32 and bf16), a CUDA
#    graph replaying new routings, the tiny models against HF (the engine on the GPU).
step test_ch18_gpu 150 python -m pytest -q -p no:cacheprovider -rs \
  tests/test_ch18_fused_moe.py tests/test_ch18_moe.py
# 2. One MoE layer of Qwen3-30B-A3B: fused Triton vs the torch loop at decode batches 1 and 64.
step moe_layer 90 python benchmarks/moe_gpu.py layer
# 3. Qwen3-30B-A3B random bf16: batch-1 decode, 64 requests, beside HF on the same weights.
step moe_model 300 python benchmarks/moe_gpu.py model

echo "+++ [$SECONDS s] summary" | tee "$OUT/summary.txt"
grep -H -E "passed|failed|error|MoE layer|target|ms/step|tok/s|speedup|GiB|TIMED OUT|exit status|skipped" \
  "$OUT"/test_ch18_gpu.txt "$OUT"/moe_layer.txt "$OUT"/moe_model.txt 2>&1 | tee -a "$OUT/summary.txt"
