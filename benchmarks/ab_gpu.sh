#!/usr/bin/env bash
# Two commits of the engine side by side on one GPU, in one call: decode ms/step (batch 1 and 64,
# CUDA graphs, benchmarks/decode_latency.py) and the official mini-sglang bench.py unchanged
# (MINISGL_DUMMY_WEIGHT=1), in the order A B A B ... so that a machine's drift falls on both.
# It is how a refactor shows it left the speed alone (issue 30: within 3% of before).
#
# Here, before the call (A = the commit before, B = the one after):
#   bash benchmarks/device_wheels.sh --no-plot
#   bash benchmarks/peers/prepare.sh   # .cache/peers/qwen3-0.6b.tgz, which device_prep.sh unpacks
#   git --git-dir=<mini-sglang mirror> show 20fcd7f:benchmark/offline/bench.py > .cache/official_bench.py
#   for x in a:A b:B; do rm -rf .ab/${x%%:*}; mkdir -p .ab/${x%%:*}
#     git archive "${x#*:}" python benchmarks | tar -x -C .ab/${x%%:*}; done
# On the device (carry .ab and .cache):
#   A_NAME=<commit A> B_NAME=<commit B> OUT=$OUT bash benchmarks/ab_gpu.sh
# $OUT/ab_summary.txt gets one line per measurement and run, then the medians and B/A.
# DECODE=generate measures decode with benchmarks/peers/bs1_decode.py instead (LLM.generate,
# batch 1, graphs up to 8: fewer sizes to compile than decode_latency.py's, for a short call).
# SIDES="a b c" measures a third (fourth, ...) commit from .ab/c (...) too, each against A; the
# names for the header go in C_NAME, D_NAME, ... like A_NAME and B_NAME.
# KINDS="decode" (or "bench") measures only that kind: a change that touches only the batch-1 path
# need not pay bench.py's compile and runs.
set -u
OUT=${OUT:-/tmp/ab}
BUDGET_S=${BUDGET_S:-540}
ROUNDS=${ROUNDS:-3}
KINDS=${KINDS:-decode bench}
SIDES=${SIDES:-a b}
COMMIT=""
for side in $SIDES; do
  upper=${side^^}
  name_var=${upper}_NAME
  COMMIT+="$upper=${!name_var:-?} "
done
source "$(dirname "$0")/gpu_steps.sh"
ROOT=$PWD
BENCH=$ROOT/.cache/official_bench.py
# Chapter 19's extension is built once per source folder (kernel/cuda_ext.py names the build by the
# sources' path too), about a minute each: a side whose CUDA sources equal the tree's gets a link
# to the tree's folder instead, so that all such sides share one build.
CSRC=python/minisgl/kernel/csrc
for side in $SIDES; do
  dir=.ab/$side/$CSRC
  # (a side that is the tree itself, through links as run_bs1_gpu.sh makes .ab/b, is left alone)
  if [ -d "$dir" ] && [ "$(realpath "$dir")" != "$(realpath "$CSRC")" ] \
      && diff -rq "$dir" "$CSRC" >/dev/null; then
    rm -rf "$dir" && ln -s "$ROOT/$CSRC" "$dir"
  fi
done

# run KIND SIDE NAME LIMIT: one measurement of one side; each side runs its own package, while
# models, wheels and Triton's cache are shared
run() {
  local kind=$1 side=$2 name=$3 limit=$4
  if [ "$kind" = decode ] && [ "${DECODE:-}" = generate ]; then
    step "$name" "$limit" env PYTHONPATH="$ROOT/.ab/$side/python" \
      python "$ROOT/.ab/$side/benchmarks/peers/bs1_decode.py" --engine minisgl --batch 1
  elif [ "$kind" = decode ]; then
    step "$name" "$limit" env PYTHONPATH="$ROOT/.ab/$side/python" \
      python "$ROOT/.ab/$side/benchmarks/decode_latency.py" --graphs-only --batch-sizes 1 64
  else
    step "$name" "$limit" env PYTHONPATH="$ROOT/.ab/$side/python" \
      MINISGL_DUMMY_WEIGHT=1 python "$BENCH"
  fi
}

# a fresh machine compiles every Triton kernel while the first runs capture their CUDA graphs
# (over 80 s for the 35 sizes bench.py captures): one uncounted run of each kind and side first
# fills the cache, so that the counted runs below measure the engine, not the compiler
# (WARM=0 leaves it out: a second call on a machine still warm from the first finds the cache there)
if [ "${WARM:-1}" != 0 ]; then
  for side in $SIDES; do
    for kind in $KINDS; do
      run "$kind" "$side" "warm_${kind}_${side}" "${WARM_LIMIT_S:-240}"
    done
  done
fi
for round in $(seq 1 "$ROUNDS"); do
  for side in $SIDES; do
    for kind in $KINDS; do
      run "$kind" "$side" "${kind}_${side}_${round}" "${RUN_LIMIT_S:-120}"
    done
  done
done
# Triton's kernels back to this machine, for a later call to carry (see device_prep.sh)
[ -d .cache/triton ] && tar czf "$OUT/triton.tgz" -C .cache triton

python - "$OUT" "$ROUNDS" $SIDES <<'PY' | tee "$OUT/ab_summary.txt"
import re, statistics, sys
from pathlib import Path
out, rounds, sides = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
figures = {}
for side in sides:
    for r in range(1, rounds + 1):
        decode = (out / f"decode_{side}_{r}.txt").read_text(errors="replace") \
            if (out / f"decode_{side}_{r}.txt").exists() else ""
        # decode_latency.py: "minisgl (CUDA graphs) batch   1:   0.953 ms/step (...)"
        for bs, ms in re.findall(r"minisgl \(CUDA graphs\) batch\s+(\d+):\s+([\d.]+) ms/step",
                                 decode):
            figures.setdefault((f"bs{bs}-decode-ms", side), []).append(float(ms))
        # bs1_decode.py: "bs1-decode engine=minisgl batch=1 ms_per_step=0.951 runs=[...]"
        for bs, ms in re.findall(r"^bs1-decode engine=\S+ batch=(\d+) ms_per_step=([\d.]+)",
                                 decode, re.M):
            figures.setdefault((f"bs{bs}-generate-ms", side), []).append(float(ms))
        bench = (out / f"bench_{side}_{r}.txt").read_text(errors="replace") \
            if (out / f"bench_{side}_{r}.txt").exists() else ""
        for tps in re.findall(r"Throughput:\s*([\d.]+)\s*tok/s", bench):
            figures.setdefault(("official-bench-tok/s", side), []).append(float(tps))
for (name, side), values in sorted(figures.items()):
    print(f"{name} {side.upper()} runs={values} median={statistics.median(values):.3f}")
for name in sorted({n for n, _ in figures}):
    for side in sides[1:]:
        a, b = figures.get((name, sides[0])), figures.get((name, side))
        if a and b:
            print(f"{name} {side.upper()}/{sides[0].upper()} = "
                  f"{statistics.median(b) / statistics.median(a):.4f}")
PY
