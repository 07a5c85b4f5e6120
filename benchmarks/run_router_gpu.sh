#!/usr/bin/env bash
# Chapter 27 (data parallelism, sglang-router) on one GPU, in one command of at most ~9 min:
#
#   bash benchmarks/device_wheels.sh --no-plot      # here: the wheels, sglang-router among them
#   COMMIT=<hash> OUT=$OUT bash benchmarks/run_router_gpu.sh     # on the device; carry .cache
#
# Qwen3-0.6B with random bf16 weights (--dummy-weight), the shared-prefix workload of
# minisgl.benchmark.router: 48 groups x 8 chats, each group's system prompt ~1,000 words
# (~1,800 tokens), 16 output tokens (ignore_eos), 64 in flight.
# 1. two servers sharing the GPU (an explicit --num-pages each: 40,000 tokens, so one pool holds
#    about 20 of the 48 prompts and the two together hold them all), sglang-router in front,
#    round_robin then cache_aware (the router restarted, the caches flushed in between);
# 2. one server with the pages of both (80,000 tokens) and no router: the single-engine baseline.
# Writes $OUT/<step>.txt and $OUT/summary.txt; STEPS="name ..." reruns only the named steps.
set -u
OUT=${OUT:-/tmp/router}
BUDGET_S=${BUDGET_S:-540}
source "$(dirname "$0")/gpu_steps.sh"
QWEN="--device cuda --model Qwen/Qwen3-0.6B --dummy-weight"
WORK="--groups 48 --per-group 8 --prefix-words 1000 --max-tokens 16 --concurrency 64"

step router_two_servers 300 python benchmarks/router.py $QWEN $WORK --workers 2 \
  --num-pages 40000
step router_one_server 200 python benchmarks/router.py $QWEN $WORK --workers 1 \
  --num-pages 80000 --policies "" --single

{ echo "$MACHINE"; echo "+++ [$SECONDS s] summary"
  grep -H -E "^workload|requests in|/ |TIMED OUT|exit status|Error" \
    "$OUT"/router_two_servers.txt "$OUT"/router_one_server.txt; } 2>&1 | tee "$OUT/summary.txt"
