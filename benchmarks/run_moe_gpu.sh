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
mkdir -p "$OUT"
export MINISGL_CACHE_DIR=$PWD/.cache PYTHONPATH=$PWD/python MINISGL_OFFLINE=1 HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
DEADLINE=$((SECONDS + 470))  # the whole script; each step also gets at most what is left
NOISE='Loading weights|Writing model shards|generation_config|^\s*$'

MACHINE="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
MACHINE+=$'\n'"$(python -c 'import sys, torch, triton, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)' 2>&1)"
MACHINE+=$'\n'"commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git here)'), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "$MACHINE"
[ -d .cache/models/Qwen/Qwen3-30B-A3B ] || echo "WARNING: .cache/models/Qwen/Qwen3-30B-A3B is missing: the model step will fail"

# step NAME LIMIT_S COMMAND...: run COMMAND under a time limit, output to the screen and $OUT/NAME.txt
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - SECONDS))
  ((left < limit)) && limit=$left
  if ((limit < 20)); then
    echo "+++ $name: skipped, the script's time is up" | tee "$OUT/$name.txt"
    return
  fi
  echo "+++ [$SECONDS s] $name (limit $limit s): $*"
  {
    echo "\$ $*"
    echo "$MACHINE"
    timeout -k 10 "$limit" "$@" 2>&1
    local rc=$?
    ((rc == 124 || rc == 137)) && echo "TIMED OUT after $limit s"
    echo "exit status $rc"
  } | grep --line-buffered -v -E "$NOISE" | tee "$OUT/$name.txt"
}

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
