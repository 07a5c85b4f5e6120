#!/usr/bin/env bash
# Chapter 16 (overlap scheduling) on one GPU, in one command of at most ~9 min:
#
#   bash benchmarks/run_stage4b_gpu.sh
#
# Needs the bundled Qwen3-0.6B config and tokenizer in .cache/models/Qwen/Qwen3-0.6B (carry .cache,
# as for benchmarks/run_stage4_gpu.sh). Writes $OUT/<step>.txt for each step (OUT defaults to
# /tmp/stage4b) and $OUT/summary.txt. Every step has a time limit, and a failing or timed-out step
# does not stop the ones after it. STEPS="name ..." runs only the named steps (a second call when
# the first one ran out of time). COMPARE_HF= (empty) leaves transformers out of step 1 (it takes
# ~4 of the ~9 minutes; for a rerun whose HF figure is already measured). OFFICIAL_BENCH=/path/to/bench.py (the official mini-sglang's
# benchmark/offline/bench.py, unchanged) adds a step that runs it with MINISGL_DUMMY_WEIGHT=1.
set -u
OUT=${OUT:-/tmp/stage4b}
BUDGET_S=${BUDGET_S:-540}  # the whole script (override in the environment); each step also gets at most what is left
NOISE='Loading weights|Writing model shards|generation_config|^\s*$|profiler_st'
source "$(dirname "$0")/gpu_steps.sh"
[ -d .cache/models/Qwen/Qwen3-0.6B ] || echo "WARNING: .cache/models/Qwen/Qwen3-0.6B is missing: the Qwen3 steps will fail"
OFF="env MINISGL_DISABLE_OVERLAP_SCHEDULING=1"
COMPARE_HF=${COMPARE_HF---compare-hf}

# 1. The official workload (Qwen3-0.6B, random bf16 weights, 256 requests, 133,966 output tokens)
# with overlap on: throughput, HF transformers in the same run (every request, 64 new tokens,
# extended to the longest output), and the profile of 50 steady decode steps (GPU busy fraction,
# host time per step; a Chrome trace of the stretch in $OUT, for the chapter's timeline figure).
# The issue's bars: >= 17,500 tok/s, >= 25x HF, GPU busy >= 90%.
step official_overlap 240 python -m minisgl.benchmark.offline --official $COMPARE_HF --profile \
  --profile-trace "$OUT/trace_overlap.json.gz"
# 2. The same workload and profile with overlap off, for the side-by-side figures.
step official_no_overlap 150 $OFF python -m minisgl.benchmark.offline --official --profile \
  --profile-trace "$OUT/trace_no_overlap.json.gz"
# 3. ms per decode step through the scheduler, CUDA graphs, batch 1 and 64, overlap on and off
# (target <= 1.0 ms at batch 1).
step decode_latency_overlap 100 python benchmarks/decode_latency.py --graphs-only
step decode_latency_no_overlap 100 $OFF python benchmarks/decode_latency.py --graphs-only
# 4. Chapter 16's tests on CUDA: overlap on == off token for token through Triton + CUDA graphs,
# EOS found one step late, aborts, retraction; the sampler on the GPU against the CPU.
step test_ch16_gpu 150 python -m pytest -q -p no:cacheprovider -rs tests/test_ch16_overlap.py \
  tests/test_ch16_sampler.py tests/test_ch16_official.py
# 5. Optional: the official bench.py itself, unchanged.
if [ -n "${OFFICIAL_BENCH:-}" ]; then
  step official_bench_py 150 env MINISGL_DUMMY_WEIGHT=1 python "$OFFICIAL_BENCH"
fi

echo "+++ [$SECONDS s] summary" | tee "$OUT/summary.txt"
grep -s -H -E "passed|failed|error|requests,|^round|^minisgl |^transformers |speedup|^profile:|ms/step|target|Throughput|TIMED OUT|exit status|skipped" \
  "$OUT"/official_overlap.txt "$OUT"/official_no_overlap.txt "$OUT"/decode_latency_overlap.txt \
  "$OUT"/decode_latency_no_overlap.txt "$OUT"/test_ch16_gpu.txt "$OUT"/official_bench_py.txt \
  2>&1 | tee -a "$OUT/summary.txt"
