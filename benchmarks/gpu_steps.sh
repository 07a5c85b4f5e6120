# Shared by the benchmarks/run_*_gpu.sh scripts (sourced, not run): the environment, a header that
# names the machine, and `step`, which runs one command under a time limit into $OUT/<name>.txt.
#
# The sourcing script sets, before `source "$(dirname "$0")/gpu_steps.sh"`:
#   OUT        the folder for the step files (created here)
#   BUDGET_S   seconds for the whole script; a step gets at most what is left of it
#   NOISE      (optional) an extended regex of log lines to leave out of the step files
#   GATHER     (optional) a name: the step files then go to a temporary folder, `pstep` appends
#              each to $RESULT/<name>_steps.txt, and RESULT is the caller's OUT (the device
#              returns at most 8 files)
# COMMIT=<hash> in the environment names the commit in the header: the device copy of the tree may
# carry stale git metadata (it printed an older commit than the one that ran)
# STEPS="name ..." in the environment runs only the named steps (a second call when the first one
# ran out of time). A failing or timed-out step does not stop the ones after it.
set -u
if [ -n "${GATHER:-}" ]; then
  RESULT=$OUT
  mkdir -p "$RESULT"
  LOG=$RESULT/${GATHER}_steps.txt
  : > "$LOG"
  OUT=$(mktemp -d "/tmp/$GATHER-steps.XXXXXX")
fi
mkdir -p "$OUT"
export MINISGL_CACHE_DIR=$PWD/.cache PYTHONPATH=$PWD/python MINISGL_OFFLINE=1 HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Triton's compiled kernels in the project's cache, so that a later call can carry them (a fresh
# machine otherwise compiles every kernel again)
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$PWD/.cache/triton}
# NVLink multicast stays off on multi-GPU machines (distributed/comm.py sets these in every rank too)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
DEADLINE=$((SECONDS + BUDGET_S))
NOISE=${NOISE:-'Loading weights|Writing model shards|generation_config|^\s*$'}

# what the call carried (.cache/wheels, the built extension, Triton's cache): see device_prep.sh;
# once per call (a run_*_gpu.sh that calls another, as run_bs1_gpu.sh calls ab_gpu.sh, prepares once)
if [ -z "${MINISGL_DEVICE_PREPARED:-}" ]; then
  bash "$(dirname "${BASH_SOURCE[0]}")/device_prep.sh"
  export MINISGL_DEVICE_PREPARED=1
fi

MACHINE="$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | sort | uniq -c)"
MACHINE+=$'\n'"$(python -c 'import sys, torch, triton, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__, "gpus", torch.cuda.device_count())' 2>&1)"
MACHINE+=$'\n'"commit ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '(no git here)')}, $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "$MACHINE"

# step NAME LIMIT_S COMMAND...: run COMMAND under a time limit, output to the screen and $OUT/NAME.txt
step() {
  local name=$1 limit=$2
  shift 2
  if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then
    return
  fi
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

# pstep NAME LIMIT_S COMMAND...: `step`, then its output appended to $LOG, for scripts that
# gather their step files into one (GATHER above)
pstep() {
  step "$@"
  if [ -f "$OUT/$1.txt" ]; then
    { echo "===== $1"; cat "$OUT/$1.txt"; } >> "$LOG"
  fi
}
