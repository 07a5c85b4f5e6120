#!/usr/bin/env bash
# A batch-1 change on one GPU in one call (issue 32): the GPU tests of the tree, its batch-1 decode
# against other commits (benchmarks/ab_gpu.sh, bs1_decode.py only), where a step goes
# (profile_decode_step.py --whole-step) and the official bench.py, in that order, so that a call
# cut short loses the least.
#
# The tree that travels is B, the change. Here, before the call, A (and C, ...) into .ab/<side>:
#   bash benchmarks/device_wheels.sh --no-plot && bash benchmarks/peers/prepare.sh
#   git --git-dir=<mini-sglang mirror> show 20fcd7f:benchmark/offline/bench.py > .cache/official_bench.py
#   rm -rf .ab/a && mkdir -p .ab/a && git archive main python benchmarks | tar -x -C .ab/a
# On the device (carry .ab .cache/wheels .cache/official_bench.py .cache/peers/qwen3-0.6b.tgz):
#   A_NAME=main B_NAME=<branch> OUT=$OUT bash benchmarks/run_bs1_gpu.sh
# Switches: SIDES="a b c" (and C_NAME) to time a third commit from .ab/c; ROUNDS (2); WARM (1: a
# warm-up process per side first; 0: none); TESTS (the test files; "" for none); BENCH_RUNS (2).
# .ab/b is made here as links to the tree, so that B and the tests share one build of chapter 19's
# extension (its build folder is named by the sources' path) and one Triton cache.
# $OUT gets one file per step (tests, ab, profile, bench_1, ...; see gpu_steps.sh) and
# ab_summary.txt.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:?set OUT}
BUDGET_S=${BUDGET_S:-560}
rm -rf .ab/b && mkdir -p .ab/b && ln -s "$PWD/python" .ab/b/python \
  && ln -s "$PWD/benchmarks" .ab/b/benchmarks
source benchmarks/gpu_steps.sh  # the environment, device_prep.sh, $MACHINE, `step`
export PYTHONUNBUFFERED=1
TESTS=${TESTS-tests/test_ch20_pdl.py tests/test_ch20_triton_attention.py tests/test_ch15_cuda_graph.py \
  tests/test_ch20_triton_backend.py}
# shellcheck disable=SC2086  # TESTS is a list of paths
[ -n "$TESTS" ] && step tests "${TESTS_LIMIT_S:-200}" \
  python -m pytest -q -rs -p no:cacheprovider $TESTS
AB_BUDGET_S=${AB_BUDGET_S:-200}
step ab $((AB_BUDGET_S + 30)) env KINDS=decode DECODE=generate WARM="${WARM:-1}" \
  ROUNDS="${ROUNDS:-2}" BUDGET_S="$AB_BUDGET_S" OUT=/tmp/ab bash benchmarks/ab_gpu.sh
[ -f /tmp/ab/ab_summary.txt ] && cp /tmp/ab/ab_summary.txt "$OUT/"
step profile "${PROFILE_LIMIT_S:-60}" \
  python benchmarks/profile_decode_step.py --steps 30 --whole-step
for i in $(seq 1 "${BENCH_RUNS:-2}"); do
  step "bench_$i" 110 env MINISGL_DUMMY_WEIGHT=1 python .cache/official_bench.py
done
