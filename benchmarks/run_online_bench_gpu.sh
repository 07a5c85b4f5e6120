#!/bin/bash
# The online serving benchmark on a GPU (issue 16): `python -m minisgl` serves Qwen/Qwen3-0.6B with
# random weights, `python -m minisgl.benchmark.serving` drives it with ShareGPT-like lengths at four
# Poisson request rates, and the figures land in $OUT (default benchmarks/results/):
#   h200_online_serving.txt   the table (TTFT/ITL/E2E mean, median, p90, p99; throughputs)
#   h200_online_serving.json  every figure;  h200_online_serving.png  latency against load
#   h200_online_metrics.txt   the server's /metrics after the runs;  h200_online_server.log
# Run from the repository root, about 3-4 minutes in all:
#   bash benchmarks/run_online_bench_gpu.sh
# The H200 image lacks the serving packages: carry .cache/wheels (benchmarks/device_wheels.sh
# makes it); benchmarks/device_prep.sh installs them.
set -euo pipefail
OUT=${OUT:-benchmarks/results}
PORT=${PORT:-19190}
RATES=${RATES:-"4 16 64 inf"}
NUM_REQUESTS=${NUM_REQUESTS:-160}
mkdir -p "$OUT"
export MINISGL_CACHE_DIR=$PWD/.cache PYTHONPATH=$PWD/python MINISGL_OFFLINE=1 HF_HUB_OFFLINE=1
bash benchmarks/device_prep.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python -m minisgl --model Qwen/Qwen3-0.6B --dummy-weight --port "$PORT" --max-seq-len 4096 \
  --log-interval 5 > "$OUT/h200_online_server.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf "http://127.0.0.1:$PORT/health" > /dev/null && break
  kill -0 "$SERVER" 2>/dev/null || { tail -30 "$OUT/h200_online_server.log"; exit 1; }
  sleep 1
done
# shellcheck disable=SC2086
timeout 270 python -m minisgl.benchmark.serving --base-url "http://127.0.0.1:$PORT" \
  --dataset sharegpt --num-requests "$NUM_REQUESTS" --request-rate $RATES --max-len 2048 \
  --seed 0 --no-progress --plot "$OUT/h200_online_serving.png" \
  --result-json "$OUT/h200_online_serving.json" | tee "$OUT/h200_online_serving.txt"
curl -s "http://127.0.0.1:$PORT/metrics" > "$OUT/h200_online_metrics.txt"
grep -E "decode .* tok/s" "$OUT/h200_online_server.log" | tail -5
