#!/usr/bin/env bash
# Issue 31, part 2: FlashInfer inside the trace loop (chapters 21-23) on one GPU, in one device
# call of at most ~9.5 min. Prepared and carried like run_peers_gpu.sh (.cache/peers,
# .cache/wheels); on the device, from the repository root:
#
#   COMMIT=<hash> OUT=$OUT bash benchmarks/peers/run_flashinfer_loop_gpu.sh
#
# FlashInfer is unpacked onto PYTHONPATH for every step here (our engine finds it, registers its
# solutions and can run --attn flashinfer). Steps, under one budget (BUDGET_S, default 560):
#   1. FlashInfer's JIT modules for Qwen3-0.6B's shapes, built in one parallel run;
#   2. capture: the official offline workload at SCALE (0.25) recorded into a trace set;
#   3. bench: every solution (torch, Triton, CUDA, FlashInfer) on every workload, graded against
#      the reference; report: the table (PASSED/INCORRECT per solution and workload);
#   4. the official workload with the defaults, then with apply (the set's fastest passing
#      solutions), median of 3 runs each;
#   5. tests/test_ch23_flashinfer.py on the GPU (the solutions against torch, the engine on the
#      flashinfer backend against the torch backend);
#   6. the official workload on --attn flashinfer, median of 3.
# $OUT gets flashinfer_loop.txt (the summary) and flashinfer_loop_steps.txt (every step).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/fi-loop}
GATHER=flashinfer_loop  # the step files, gathered into $OUT/flashinfer_loop_steps.txt
BUDGET_S=${BUDGET_S:-560}
SCALE=${SCALE:-0.25}
NOISE='Loading weights|Writing model shards|generation_config|^\s*$|it/s\]|s/it\]'
source benchmarks/gpu_steps.sh  # the environment, device_prep.sh, the header, `step`, `pstep`
source benchmarks/peers/flashinfer_site.sh  # SITE, MODELS, the JIT build step
export PYTHONPATH="$ROOT/python:$SITE"
SET=/tmp/fi-loop-set

rm -rf "$SET"
pstep capture 100 python benchmarks/stage5_e2e.py capture "$SET" --scale "$SCALE"
pstep bench 150 python -m minisgl.trace bench "$SET" --warmup 3 --iters 10 --trials 3
pstep report 30 python -m minisgl.trace report "$SET"
pstep run_default 50 python benchmarks/stage5_e2e.py run default --scale "$SCALE" --repeat 3
pstep run_apply 50 python benchmarks/stage5_e2e.py run apply --trace-set "$SET" --scale "$SCALE" --repeat 3
pstep tests 120 python -m pytest -q -p no:cacheprovider tests/test_ch23_flashinfer.py
pstep run_flashinfer 50 python benchmarks/stage5_e2e.py run flashinfer --scale "$SCALE" --repeat 3

echo "+++ [$SECONDS s] summary"
{
  echo "flashinfer in the trace loop (issue 31): commit ${COMMIT:-?}, scale $SCALE"
  echo "$MACHINE"
  grep -h "^flashinfer .* apache-tvm-ffi\|^built " "$OUT/flashinfer.txt" 2>/dev/null
  sed -n '/^definition /,/^exit status/p' "$OUT/report.txt" 2>/dev/null  # the whole table
  grep -h "^RESULT\|passed\|failed" "$OUT"/run_*.txt "$OUT/tests.txt" 2>/dev/null
  grep -h "apply: attention backend\|ops swapped" "$OUT/run_apply.txt" 2>/dev/null
  for f in "$OUT"/*.txt; do
    echo "step $(basename "$f" .txt): $(grep -h -E '^(exit status|TIMED OUT)' "$f" | tr '\n' ' ')"
  done
} | tee "$RESULT/flashinfer_loop.txt"
