#!/usr/bin/env bash
# Chapters 21-23 (the FlashInfer Trace loop) on one GPU, in one command of at most ~9 min:
#
#   bash benchmarks/run_stage5_gpu.sh
#
# Needs the bundled Qwen3-0.6B config and tokenizer in .cache/models/Qwen/Qwen3-0.6B (as
# run_stage4_gpu.sh), flashinfer-bench installed with --no-deps (its data model only). Writes
# $OUT/<step>.txt (OUT defaults to /tmp/stage5; steps as in benchmarks/gpu_steps.sh), the trace
# set in $OUT/set, plots as PNG.
# SCALE (default 0.25) shortens the official workload's lengths for the capture and the runs.
# A device call returns at most 8 files and none over its size limit: run with OUT outside the
# call's $OUT and bring back a tar without the sets (their blobs are large), e.g.
#   OUT=/tmp/s5 COMMIT=<hash> bash benchmarks/run_stage5_gpu.sh
#   tar czf $OUT/s5.tgz -C /tmp --exclude=s5/set --exclude=s5/set_fib s5
set -u
OUT=${OUT:-/tmp/stage5}
SCALE=${SCALE:-0.25}
BUDGET_S=${BUDGET_S:-540}  # the whole script (override in the environment); each step also gets at most what is left
source "$(dirname "$0")/gpu_steps.sh"
SET=$OUT/set

rm -rf "$SET"
# 1. Capture under the official offline workload (lengths x SCALE), CUDA graphs on.
step capture 120 python benchmarks/stage5_e2e.py capture "$SET" --scale "$SCALE"
# 2. Bench every solution (torch, Triton, CUDA ext) on every workload; 3. table + plot.
step bench 150 python -m minisgl.trace bench "$SET" --warmup 3 --iters 10 --trials 3
step report 30 python -m minisgl.trace report "$SET" --plot "$OUT/report.png"
# 3b. flashinfer-bench's own CLI on a copy of the set (its runners need CUDA devices; our
# Solutions are Python entries that import minisgl, found through PYTHONPATH=python/).
rm -rf "$OUT/set_fib" && cp -r "$SET" "$OUT/set_fib" && rm -rf "$OUT/set_fib/traces"
step fib_cli 90 flashinfer-bench run --local "$OUT/set_fib" --definitions rmsnorm_h1024 fused_add_rmsnorm_h1024 silu_and_mul_i3072 --warmup-runs 3 --iterations 10 --num-trials 1 --save-results
# 4. The official workload: defaults, apply (tok/s, median of 5: one run lasts about a second);
# torch-only comes last (step 8).
step run_default 60 python benchmarks/stage5_e2e.py run default --scale "$SCALE" --repeat 5
step run_apply 60 python benchmarks/stage5_e2e.py run apply --trace-set "$SET" --scale "$SCALE" --repeat 5
# 5. Greedy tokens in fp32: apply == default.
step greedy 90 bash -c "python benchmarks/stage5_e2e.py greedy default $OUT/greedy_default.json && python benchmarks/stage5_e2e.py greedy apply $OUT/greedy_apply.json --trace-set $SET && cmp $OUT/greedy_default.json $OUT/greedy_apply.json && echo 'greedy tokens: apply == default'"
# 6. Batch-1 latency; 7. roofline plot.
step latency 60 python benchmarks/stage5_e2e.py latency --trace-set "$SET"
step roofline 20 python benchmarks/stage5_e2e.py roofline "$OUT/roofline.png"
# 8. Torch-only: torch attention, no fused kernels, and so no CUDA graphs (the torch backend
# cannot be captured): minutes at SCALE 0.25 (it timed out at 90 s on the H200), so it runs last,
# with what is left of the budget, and the figures above do not wait for it.
step run_torch 240 env MINISGL_DISABLE_FUSED_KERNELS=1 python benchmarks/stage5_e2e.py run torch --scale "$SCALE" --repeat 1
# the summary repeats lines of the steps: prefixed, so that a page can quote a step's own line
grep -h "RESULT\|greedy tokens\|bench:" "$OUT"/*.txt | sed 's/^/summary: /' | tee "$OUT/summary.txt"
