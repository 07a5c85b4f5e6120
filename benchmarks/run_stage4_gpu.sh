#!/usr/bin/env bash
# Chapters 15 (CUDA graphs) and 20 (Triton attention) on one GPU, in one command of at most ~9 min:
#
#   bash benchmarks/run_stage4_gpu.sh
#
# Needs the bundled Qwen3-0.6B config and tokenizer in .cache/models/Qwen/Qwen3-0.6B (18 MB; make
# it here with `mkdir -p .cache/models && cp -r ~/.cache/minisgl/models/Qwen .cache/models/` and
# carry .cache). Writes $OUT/<step>.txt for each step (OUT defaults to /tmp/stage4) and a summary.
# Every step has a time limit, and a failing or timed-out step does not stop the ones after it.
# STEPS="name ..." runs only the named steps (e.g. STEPS="tune_decode kernel_count" for a second
# call when the first one ran out of time).
set -u
OUT=${OUT:-/tmp/stage4}
BUDGET_S=${BUDGET_S:-540}  # the whole script (override in the environment); each step also gets at most what is left
source "$(dirname "$0")/gpu_steps.sh"
[ -d .cache/models/Qwen/Qwen3-0.6B ] || echo "WARNING: .cache/models/Qwen/Qwen3-0.6B is missing: steps 2-4 will fail"

# 0. The CUDA extension of chapter 19 (about a minute, once): later steps load it from .cache.
step cuda_ext 150 python -c 'import sys, time; from minisgl.kernel import cuda_ext; t = time.time(); ext = cuda_ext.load_extension(); print("CUDA extension", "loaded" if ext else "UNAVAILABLE", f"in {time.time() - t:.0f} s"); sys.exit(ext is None)'
# 1. The tests of chapters 15 and 20: the GPU-only ones, and the rest on CUDA where they can be.
step test_stage4_gpu 200 python -m pytest -q -p no:cacheprovider -rs \
  tests/test_ch15_cuda_graph.py tests/test_ch20_triton_attention.py tests/test_ch20_triton_backend.py
# 1b. Chapter 20's fused small kernels (RMSNorm, q/k norm + RoPE, SiLU-and-mul) compiled: fp32
# and fp16 against the torch layers, bf16 on the GPU, tiny models with them against HF.
step test_fused_gpu 120 python -m pytest -q -p no:cacheprovider -rs tests/test_ch20_fused_kernels.py
# 2. Greedy tokens: triton + CUDA graphs == torch eager == HF (fp32); bf16 logits of one step.
step attention_parity 150 python benchmarks/gpu_attention_parity.py
# 3. ms per decode step, batch 1 and 64: graphs, eager, HF generate.
step decode_latency 150 python benchmarks/decode_latency.py
# 3a. Where a batch-1 replay's GPU time goes: its kernels grouped by name (run after cuda_ext: a
# step killed while the extension builds leaves its lock behind, and every later load waits).
step profile_decode 90 python benchmarks/profile_decode_step.py
# 3b. The decode attention kernel's tiling grid at 1x8192, 4x8192, 16x4096, 256x1024 against SDPA:
# the best config per shape and the DECODE_CONFIGS table to paste.
step tune_decode 170 python benchmarks/tune_decode_attention.py
# 3c. Kernels per decode step with the fused kernels and with the torch ops.
step kernel_count 90 python benchmarks/count_decode_kernels.py
# 4. The chapter-11 offline throughput benchmark, now with Triton attention and CUDA graphs.
step offline_bench_graphs 150 python -m minisgl.benchmark.offline --model Qwen/Qwen3-0.6B \
  --dummy-weight --compare-hf --num-requests 64

echo "+++ [$SECONDS s] summary" | tee "$OUT/summary.txt"
grep -s -H -E "passed|failed|error|^ok|^FAIL|checks|ms/step|target|speedup|tok/s|CUDA graphs:|CUDA extension|TIMED OUT|exit status|skipped|^best at|WRONG|kernels per|CUDA kernels" \
  "$OUT"/cuda_ext.txt "$OUT"/test_stage4_gpu.txt "$OUT"/test_fused_gpu.txt \
  "$OUT"/attention_parity.txt "$OUT"/decode_latency.txt "$OUT"/profile_decode.txt "$OUT"/tune_decode.txt \
  "$OUT"/kernel_count.txt "$OUT"/offline_bench_graphs.txt 2>&1 | tee -a "$OUT/summary.txt"
