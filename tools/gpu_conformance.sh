#!/usr/bin/env bash
# Runs the CUDA conformance and deliberate-bug programs on a real GPU and on the CPU emulator,
# then compares them. For the lead to run on an H200 (or any sm_90 machine with nvcc):
#
#     OUT=/tmp/conf tools/gpu_conformance.sh
#
# Writes, for every program NAME (tests/cuda/conformance/*.cu and tests/cuda/bugs/*.cu):
#   $OUT/gpu/NAME.txt   the GPU run's stdout followed by a line "exit code: N"
#   $OUT/emu/NAME.txt   the same for the emulator (its own "emu:" lines go to NAME.stderr)
#   $OUT/diff/NAME.*    differences: GPU vs emulator, and GPU vs tests/cuda/conformance/NAME.expected
# and prints a summary. Failures never stop the script; it exits 1 if any conformance program
# differs or fails. Bug programs are expected to run on the GPU and to be reported by the emulator.
set -u

REPO="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${OUT:-$REPO/gpu_conformance_out}"
NVCC="${NVCC:-nvcc}"
PYTHON="${PYTHON:-python3}"
ARCH="${ARCH:-sm_90}"
TIMEOUT="${TIMEOUT:-120}"

mkdir -p "$OUT/gpu" "$OUT/emu" "$OUT/bin" "$OUT/diff"

run_gpu() {  # src name
    local src="$1" name="$2" rc
    if "$NVCC" -std=c++17 -arch="$ARCH" -o "$OUT/bin/$name" "$src" >"$OUT/gpu/$name.compile.txt" 2>&1; then
        timeout "$TIMEOUT" "$OUT/bin/$name" >"$OUT/gpu/$name.stdout" 2>"$OUT/gpu/$name.stderr"
        rc=$?
    else
        : >"$OUT/gpu/$name.stdout"
        rc="compile-error"
    fi
    { cat "$OUT/gpu/$name.stdout"; echo "exit code: $rc"; } >"$OUT/gpu/$name.txt"
    echo "$rc"
}

run_emu() {  # src name
    local src="$1" name="$2" rc
    timeout "$TIMEOUT" "$PYTHON" "$REPO/tools/emu_kernels.py" "$src" >"$OUT/emu/$name.stdout" 2>"$OUT/emu/$name.stderr"
    rc=$?
    { cat "$OUT/emu/$name.stdout"; echo "exit code: $rc"; } >"$OUT/emu/$name.txt"
    echo "$rc"
}

failures=0
summary=()
for src in "$REPO"/tests/cuda/conformance/*.cu "$REPO"/tests/cuda/bugs/*.cu; do
    [ -e "$src" ] || continue
    name="$(basename "$src" .cu)"
    kind="$(basename "$(dirname "$src")")"
    gpu_rc="$(run_gpu "$src" "$name")"
    emu_rc="$(run_emu "$src" "$name")"
    if [ "$kind" = "conformance" ]; then
        status="same"
        if ! diff -u "$OUT/gpu/$name.txt" "$OUT/emu/$name.txt" >"$OUT/diff/$name.gpu-vs-emu.diff"; then
            status="DIFFERENT"
        fi
        expected="$REPO/tests/cuda/conformance/$name.expected"
        vs_expected="no .expected file"
        if [ -f "$expected" ]; then
            if diff -u "$expected" "$OUT/gpu/$name.stdout" >"$OUT/diff/$name.expected-vs-gpu.diff"; then
                vs_expected="matches .expected"
            else
                vs_expected="DIFFERS from .expected"
            fi
        fi
        if [ "$status" != "same" ] || [ "$gpu_rc" != "0" ] || [ "$emu_rc" != "0" ] || [ "$vs_expected" != "matches .expected" ]; then
            failures=$((failures + 1))
        fi
        summary+=("$(printf '%-12s %-24s gpu exit %-13s emu exit %-4s gpu vs emu: %-9s gpu %s' "$kind" "$name" "$gpu_rc" "$emu_rc" "$status" "$vs_expected")")
    else
        reported="no"
        grep -q "emu: error:" "$OUT/emu/$name.stderr" && reported="yes"
        [ "$reported" = "yes" ] || failures=$((failures + 1))
        summary+=("$(printf '%-12s %-24s gpu exit %-13s emu exit %-4s emulator reported the bug: %s' "$kind" "$name" "$gpu_rc" "$emu_rc" "$reported")")
    fi
done

echo "== summary (details under $OUT) =="
printf '%s\n' "${summary[@]}"
if [ "$failures" -eq 0 ]; then
    echo "gpu_conformance: everything agrees"
    exit 0
fi
echo "gpu_conformance: $failures program(s) need a look"
exit 1
