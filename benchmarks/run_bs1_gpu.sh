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
# Switches: SIDES="a b c" (and C_NAME) to time a third commit from .ab/c; ROUNDS (2); TESTS (the
# test files; "" for none); BENCH_RUNS (2). .ab/b is made here as links to the tree, so that B and
# the tests share one build of chapter 19's extension (its build folder is named by the sources'
# path) and one Triton cache.
# $OUT gets tests.txt, ab_log.txt, ab_summary.txt, profile.txt, bench.txt.
set -u
cd "$(dirname "$0")/.."
R=${OUT:?set OUT}
rm -rf .ab/b && mkdir -p .ab/b && ln -s "$PWD/python" .ab/b/python \
  && ln -s "$PWD/benchmarks" .ab/b/benchmarks
bash benchmarks/device_prep.sh
export MINISGL_CACHE_DIR=$PWD/.cache PYTHONPATH=$PWD/python MINISGL_OFFLINE=1 HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRITON_CACHE_DIR=$PWD/.cache/triton
export PYTHONUNBUFFERED=1
TESTS=${TESTS-tests/test_ch20_pdl.py tests/test_ch20_triton_attention.py tests/test_ch15_cuda_graph.py \
  tests/test_ch20_triton_backend.py}
if [ -n "$TESTS" ]; then
  echo "== tests $(date +%T)"
  # shellcheck disable=SC2086  # TESTS is a list of paths
  timeout "${TESTS_LIMIT_S:-200}" python -m pytest -q -rs -p no:cacheprovider $TESTS \
    > "$R/tests.txt" 2>&1
  echo "exit status $?" >> "$R/tests.txt"
  tail -2 "$R/tests.txt"
fi
echo "== ab $(date +%T)"
KINDS=decode DECODE=generate WARM=1 ROUNDS=${ROUNDS:-2} BUDGET_S=${AB_BUDGET_S:-200} OUT=/tmp/ab \
  bash benchmarks/ab_gpu.sh > "$R/ab_log.txt" 2>&1
cp /tmp/ab/ab_summary.txt "$R/" && cat "$R/ab_summary.txt"
echo "== profile $(date +%T)"
timeout "${PROFILE_LIMIT_S:-60}" python benchmarks/profile_decode_step.py --steps 30 --whole-step \
  > "$R/profile.txt" 2>&1
grep -E "^per replay|^whole step" "$R/profile.txt"
for i in $(seq 1 "${BENCH_RUNS:-2}"); do
  echo "== bench $i $(date +%T)"
  timeout 110 env MINISGL_DUMMY_WEIGHT=1 python .cache/official_bench.py 2>&1 \
    | grep -E "Throughput|Error" | tee -a "$R/bench.txt"
done
