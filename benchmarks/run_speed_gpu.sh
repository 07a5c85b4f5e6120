#!/usr/bin/env bash
# Issue 32's speed figures on one H200, in device calls of at most ~9 min each.
#
# Here first (the device reaches no package index and no hub):
#   bash benchmarks/device_wheels.sh --no-plot && bash benchmarks/peers/prepare.sh
# On the device, from the repository root. Everything takes ~11 min on a fresh machine (FlashInfer's
# JIT build ~110 s, MoE ~150 s, HF's compile ~120 s), so two calls:
#   1. carry .cache/peers .cache/wheels (~62 MiB with the repository):
#        MOE=0 HF_STATIC=0 COMMIT=<hash> OUT=$OUT bash benchmarks/run_speed_gpu.sh
#   2. carry .cache/wheels .cache/models/Qwen/Qwen3-0.6B (~39 MiB):
#        PEERS=0 STEPS="bs1 hf_static moe" COMMIT=<hash> OUT=$OUT bash benchmarks/run_speed_gpu.sh
#      (bs1 again, so that the HF figure and ours come from the same machine; add any step that
#      call 1 reported as skipped). One call without STEPS runs everything in the order below until
#      BUDGET_S (default 560) is spent.
# Switches: PEERS=1 (the default when .cache/peers holds FlashInfer's zip) builds FlashInfer and
# runs it beside our extend kernel and the official engine at batch 64; PEERS=0 compares the extend
# kernel with SDPA instead (benchmarks/triton_attention.py) and leaves the official engine out.
# MOE=0 leaves out Qwen3-30B-A3B (61 GB of weights: H200 only), HF_STATIC=0 HF's compiled decode.
#
# Steps, most important first, so that a call out of time loses the least: bs1 (batch-1 decode
# through LLM.generate, CUDA graphs), bs64 (64 x 32-token prompt, 512 greedy steps through
# LLM.generate), bench_1 (the official bench.py, unchanged; compiles), flashinfer + extend (the
# kernels on bench.py's first prefill batch), bench_2 and bench_3, bs64_official, parity (greedy
# tokens equal the torch backend's with decode steps replayed in CUDA graphs), hf_static, moe.
# $OUT gets h200_speed.txt (the summary: commit, machine, one line per figure, `none` where a step
# failed or did not run) and h200_speed_steps.txt (every step's output): the device returns only
# 8 files, so the step files are gathered into one.
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-/tmp/speed}
GATHER=h200_speed  # the step files, gathered into $OUT/h200_speed_steps.txt; RESULT is $OUT
BUDGET_S=${BUDGET_S:-560}
NOISE='Loading weights|Writing model shards|generation_config|^\s*$|it/s\]|s/it\]|req/s\]'
# PEERS is read here: flashinfer_site.sh reuses the name for the folder .cache/peers
ZIP=.cache/peers/flashinfer-0.7.2.post1-slim.zip
USE_PEERS=${PEERS:-$([ -f "$ZIP" ] && echo 1 || echo 0)}
if [ "$USE_PEERS" = 1 ] && [ ! -f "$ZIP" ]; then
  echo "WARNING: PEERS=1 but $ZIP is missing (carry .cache/peers): FlashInfer left out"
  USE_PEERS=0
fi
source benchmarks/gpu_steps.sh  # the environment, device_prep.sh, $MACHINE, `step`, `pstep`
export PYTHONUNBUFFERED=1  # a step killed at its limit still leaves what it printed
# Qwen3-0.6B's config and tokenizer (every Qwen3 step; Qwen3-30B-A3B's folder is built from it),
# unpacked by device_prep.sh from .cache/peers/qwen3-0.6b.tgz
QWEN=.cache/models/Qwen/Qwen3-0.6B
[ -d "$QWEN" ] || echo "WARNING: $QWEN is missing: carry .cache/peers or $QWEN"
BENCH=.cache/peers/mini-sglang/benchmark/offline/bench.py  # mini-sglang 20fcd7f's, unchanged
[ -f "$BENCH" ] || BENCH=.cache/official_bench.py  # where benchmarks/ab_gpu.sh keeps a copy
bench() { pstep "bench_$1" "$2" env MINISGL_DUMMY_WEIGHT=1 python "$ROOT/$BENCH"; }

# batch 1 through LLM.generate (the scheduler, CUDA graphs up to 8): decode_latency.py's
# --graphs-only run compiles 11 graph sizes and did not finish in 120 s on a fresh H100
pstep bs1 120 python benchmarks/peers/bs1_decode.py --engine minisgl --batch 1
pstep bs64 120 python benchmarks/peers/bs1_decode.py --engine minisgl --batch 64
bench 1 180  # the first run also compiles the Triton kernels of its 35 graph sizes
if [ "$USE_PEERS" = 1 ]; then
  source benchmarks/peers/flashinfer_site.sh  # PEERS, SITE; its step `flashinfer` builds the JIT
  pstep extend 120 env PYTHONPATH="$ROOT/python:$SITE" \
    python benchmarks/peers/attention_kernels.py --page-sizes 1  # the engine's default page size
fi
# no FlashInfer figure on the official prefill shape: our extend kernel against SDPA causal
grep -q -E '^extend-attention shape=\S+tok/page1 flashinfer=[0-9]' "$OUT/extend.txt" 2>/dev/null \
  || pstep extend_sdpa 120 python benchmarks/triton_attention.py
bench 2 100
bench 3 100
[ "$USE_PEERS" = 1 ] && pstep bs64_official 150 env PYTHONPATH="$PEERS/mini-sglang/python:$SITE" \
  python benchmarks/peers/bs1_decode.py --engine official --batch 64
# test_ch15: graph replays' greedy tokens == the torch backend's, every decode step replayed;
# test_ch20_triton_backend: the same through radix cache and chunked prefill
pstep parity 60 python -m pytest -q -rs -p no:cacheprovider tests/test_ch15_cuda_graph.py \
  tests/test_ch20_triton_backend.py
[ "${HF_STATIC:-1}" != 0 ] && pstep hf_static 240 \
  python benchmarks/decode_latency.py --hf-static --batch-sizes 1 --hf-steps 200
[ "${MOE:-1}" != 0 ] && pstep moe 300 python benchmarks/moe_gpu.py model

echo "+++ [$SECONDS s] summary"
MACHINE="$MACHINE" COMMIT="${COMMIT:-}" python - "$OUT" <<'PY' | tee "$RESULT/h200_speed.txt"
import os
import re
import statistics
import sys
from pathlib import Path

out = Path(sys.argv[1])


def text(name: str) -> str:
    path = out / f"{name}.txt"
    return path.read_text(errors="replace") if path.exists() else ""


def find(name: str, pattern: str) -> str:
    m = re.search(pattern, text(name), re.M)
    return m.group(1) if m else "none"


def ratio(a: str, b: str) -> str:
    return "none" if "none" in (a, b) else f"{float(a) / float(b):.3f}"


commit = os.environ.get("COMMIT") or "(not given: pass COMMIT=...)"
print(f"issue 32 speed: minisgl commit {commit}")
print(os.environ.get("MACHINE", ""))
bs1 = find("bs1", r"^bs1-decode engine=minisgl batch=1 ms_per_step=([\d.]+)")
hf = find("hf_static", r"transformers static cache \+ compile batch\s+1:\s+([\d.]+) ms/step")
print(f"bs1-decode ms={bs1} hf-static={hf} target<=0.70")
runs = []  # bench.py: "Total: 133966tok, Time: 8.60s, Throughput: 15573.12tok/s"
for r in (1, 2, 3):
    tps = find(f"bench_{r}", r"Total:\s*\d+tok, Time: [\d.]+s, Throughput:\s*([\d.]+)\s*tok/s")
    runs += [] if tps == "none" else [float(tps)]
print(f"official-bench tok/s={f'{statistics.median(runs):.2f}' if runs else 'none'} runs={runs}")
fi = re.search(r"extend-attention shape=(\S+tok/page1) flashinfer=([\d.]+) triton=([\d.]+)",
               text("extend"), re.M)
sdpa = re.search(r"time extend batch\s+(\d+) x\s+(\d+) new tokens: triton\s+([\d.]+) us.*"
                 r"\| sdpa\s+([\d.]+) us", text("extend_sdpa"), re.M)
if fi:  # ratio > 1: our kernel is faster
    print(f"extend-attention ratio={ratio(fi[2], fi[3])} peer=flashinfer shape={fi[1]} "
          f"flashinfer_ms={fi[2]} triton_ms={fi[3]}")
elif sdpa:
    print(f"extend-attention ratio={ratio(sdpa[4], sdpa[3])} peer=sdpa shape=b{sdpa[1]}xq{sdpa[2]} "
          f"sdpa_us={sdpa[4]} triton_us={sdpa[3]}")
else:
    print("extend-attention ratio=none peer=none")
bs64 = r"bs1-decode engine={} batch=64 ms_per_step=([\d.]+)"
print(f"bs64-decode ms={find('bs64', bs64.format('minisgl'))} "
      f"official={find('bs64_official', bs64.format('official'))} target<=2.0,<official")
moe = find("moe", r"minisgl decode batch\s+1:\s+([\d.]+) ms/step")
print(f"moe-bs1-decode ms={moe}")
parity = text("parity")
summary = re.findall(r"^=*\s*(\d+ (?:passed|failed|errors?|skipped).* in [\d.]+s.*?)\s*=*$",
                     parity, re.M)
passed = summary and re.search(r"^exit status 0$", parity, re.M) \
    and not re.search(r"failed|error", summary[-1])
verdict = ("none" if "exit status" not in parity  # skipped, or not run in this call
           else "timed-out" if "TIMED OUT" in parity else "passed" if passed else "failed")
print(f"greedy-parity result={verdict} tests=test_ch15_cuda_graph,test_ch20_triton_backend "
      f"pytest=\"{summary[-1] if summary else 'none'}\"")
for path in sorted(out.glob("*.txt")):
    status = re.findall(r"^(exit status \d+|TIMED OUT.*|.*skipped, the script's time is up)$",
                        path.read_text(errors="replace"), re.M)
    print(f"step {path.stem}: {'; '.join(status) or '?'}")
PY
