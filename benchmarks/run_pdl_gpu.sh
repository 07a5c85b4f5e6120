#!/usr/bin/env bash
# Programmatic dependent launch (kernel/triton/pdl.py) on one Hopper GPU, in one call of ~9 min:
# what it buys, measured as off/on pairs in the same call (MINISGL_DISABLE_PDL=1 turns it off).
#
# Here first: bash benchmarks/device_wheels.sh --no-plot, and .cache/official_bench.py (see
# benchmarks/ab_gpu.sh). On the device, carrying .cache/wheels, .cache/official_bench.py and
# .cache/peers/qwen3-0.6b.tgz:
#   COMMIT=<hash> OUT=$OUT bash benchmarks/run_pdl_gpu.sh
# Steps, most important first:
#   tests    the PDL chain test (test_ch20_pdl.py) and the greedy parity of CUDA-graph replays with
#            the torch backend (test_ch15_cuda_graph.py, test_ch20_triton_backend.py), PDL on
#   bs1_*    batch-1 decode ms/step through LLM.generate (benchmarks/peers/bs1_decode.py)
#   bench_*  the official bench.py, unchanged (MINISGL_DUMMY_WEIGHT=1)
#   chain    benchmarks/gemv_chain.py --pdl: each projection's GEMV over 28 layers in a CUDA graph,
#            without and with PDL, and a sweep of bf16 tiles with PDL
# $OUT gets pdl_summary.txt, pdl_steps.txt (every step's output) and triton.tgz (the compiled
# kernels, for the next call's .cache/triton.tgz).
set -u
OUT=${OUT:-/tmp/pdl}
GATHER=pdl  # the step files, gathered into $OUT/pdl_steps.txt; RESULT is $OUT
BUDGET_S=${BUDGET_S:-560}
NOISE='Loading weights|Writing model shards|generation_config|^\s*$|it/s\]|s/it\]|req/s\]|batch/s\]'
source "$(dirname "$0")/gpu_steps.sh"
export PYTHONUNBUFFERED=1

pstep tests 150 python -m pytest -q -rs -p no:cacheprovider tests/test_ch20_pdl.py \
  tests/test_ch15_cuda_graph.py tests/test_ch20_triton_backend.py
for pdl in 0 1; do  # bs1_pdl0: MINISGL_DISABLE_PDL=1
  pstep "bs1_pdl$pdl" 100 env MINISGL_DISABLE_PDL=$((1 - pdl)) python benchmarks/peers/bs1_decode.py \
    --engine minisgl --batch 1
done
for pdl in 0 1; do
  pstep "bench_pdl$pdl" 110 env MINISGL_DISABLE_PDL=$((1 - pdl)) MINISGL_DUMMY_WEIGHT=1 python .cache/official_bench.py
done
pstep chain 150 python benchmarks/gemv_chain.py --pdl --replays 2

{ echo "$MACHINE"; echo "+++ [$SECONDS s] summary"
  grep -H -E "passed|failed|^bs1-decode|Throughput|^pdl |best-bf16-pdl|TIMED OUT|exit status|skipped, the" \
    "$OUT"/*.txt; } 2>&1 | tee "$RESULT/pdl_summary.txt"
tar czf "$RESULT/triton.tgz" -C .cache triton 2>/dev/null
