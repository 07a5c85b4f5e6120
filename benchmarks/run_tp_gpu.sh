#!/usr/bin/env bash
# Chapter 17 (tensor parallelism) on a machine with 2 GPUs, in one command of at most ~9.5 min:
#
#   bash benchmarks/run_tp_gpu.sh
#
# Needs the bundled Qwen3-0.6B and Qwen3-30B-A3B configs and tokenizer in .cache/models/Qwen/
# (make them here with `python -c "from minisgl.utils.offline import prepare_qwen3,
# prepare_qwen3_moe; prepare_qwen3(); prepare_qwen3_moe()"` and `mkdir -p .cache/models && cp -r
# ~/.cache/minisgl/models/Qwen .cache/models/`, and carry .cache). Writes $OUT/<step>.txt per step
# (OUT defaults to /tmp/tp_gpu). Each step has a time limit; a failing step does not stop the
# others. STEPS="name ..." runs only the named steps.
set -u
OUT=${OUT:-/tmp/tp_gpu}
BUDGET_S=${BUDGET_S:-570}  # the whole script (override in the environment); each step also gets at most what is left
NOISE='Loading weights|Writing model shards|generation_config|FutureWarning|return func|^\s*$'
source "$(dirname "$0")/gpu_steps.sh"

# 1-2. Greedy tokens at TP=2 vs TP=1 (fp32, one random checkpoint each): prints "N/N sequences
# identical" and PASS when no sequence differs in its first 8 tokens.
step parity_qwen3 150 python benchmarks/tp_gpu.py parity --model qwen3-4layer --tp 2
step parity_moe 200 python benchmarks/tp_gpu.py parity --model qwen3-moe-2layer --tp 2
# 3-4. The official offline workload (256 requests, Qwen3-0.6B random bf16) at TP=1 and TP=2.
# TP=1 must stay within 3% of the figure before chapter 17 (python -m minisgl.benchmark.offline
# --official at commit 2332c9c).
step offline_tp1 120 python benchmarks/tp_gpu.py offline --tp 1
step offline_tp2 120 python benchmarks/tp_gpu.py offline --tp 2
# 5. The server with --tp 2 answers a chat; SIGTERM leaves no process.
server_tp2() {
  local port=19417 log=$OUT/server_tp2.log
  python -m minisgl --model Qwen/Qwen3-0.6B --dummy-weight --tp 2 --port $port >"$log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 120); do curl -sf localhost:$port/health >/dev/null && break; sleep 1; done
  ps -o pid,args --ppid $pid
  curl -s localhost:$port/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model": "Qwen/Qwen3-0.6B", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}'
  echo
  local children
  children=$(pgrep -P $pid | tr '\n' ' ')
  kill -TERM $pid
  wait $pid
  echo "server exit status $?"
  sleep 2
  local left=""
  for c in $children; do kill -0 "$c" 2>/dev/null && left+="$c "; done
  echo "processes left: ${left:-none}"
  tail -5 "$log"
}
export OUT
export -f server_tp2
step server_tp2 120 bash -c server_tp2
echo "results in $OUT"
