#!/usr/bin/env bash
# Issue 31, part 1: what the peers device call (benchmarks/peers/run_peers_gpu.sh) carries, made
# here, since the device reaches no package index and no hub. Run from anywhere, after our own
# engine's wheels:
#
#   bash benchmarks/device_wheels.sh --no-plot && bash benchmarks/peers/prepare.sh
#
# Makes .cache/peers/ (git-ignored, like all of .cache/):
#   flashinfer-0.7.2.post1-slim.zip   the flashinfer-python wheel's files less the source trees
#                                     that decode, prefill, norm, rope, activation and sampling
#                                     never build (SLIM_OUT below); unpacked onto a PYTHONPATH
#                                     folder on the device, not installed
#   apache_tvm_ffi-*.whl               the version FlashInfer requires (its METADATA is checked),
#                                     cp312 manylinux: installed --no-deps --target that folder
#   mini-sglang/                       sgl-project/mini-sglang at 20fcd7f: python/ and benchmark/
#                                     (benchmark/offline/bench.py unchanged)
#   qwen3-0.6b.tgz                     Qwen/Qwen3-0.6B's config and tokenizer (the bundled offline
#                                     copy; tokenizer.json alone is 18.6 MB, 2.9 MB compressed)
# and prints what the call would carry: the repository's travelling files + .cache/peers +
# .cache/wheels, which must stay under the device's 64 MiB (this script fails over 64 and warns
# over 58). Downloads are kept in .cache/peers-downloads (not carried) so a rerun needs no network.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PEERS=.cache/peers
DOWNLOADS=.cache/peers-downloads
FLASHINFER=0.7.2.post1
TVM_FFI=0.1.15.post2  # the newest apache-tvm-ffi that FlashInfer's "<0.2,>=0.1.11" admits (2026-12-05)
OFFICIAL_COMMIT=20fcd7f
OFFICIAL_MIRROR=${OFFICIAL_MIRROR:-/work/.mirror/sgl-project+mini-sglang/repo}
LIMIT_MIB=64
AIM_MIB=58

git check-ignore -q "$PEERS" || { echo "FAIL: $PEERS is not git-ignored (.gitignore must cover .cache/)"; exit 1; }
git check-ignore -q "$DOWNLOADS" || { echo "FAIL: $DOWNLOADS is not git-ignored"; exit 1; }
if ! compgen -G ".cache/wheels/*.whl" > /dev/null; then
  echo "FAIL: .cache/wheels is empty: run bash benchmarks/device_wheels.sh --no-plot first"
  exit 1
fi
if compgen -G ".cache/wheels/matplotlib-*.whl" > /dev/null; then
  echo "WARNING: .cache/wheels holds matplotlib (device_wheels.sh without --no-plot, ~32 MB):" \
       "the carry will not fit; rerun it with --no-plot into an empty .cache/wheels"
fi
rm -rf "$PEERS"
mkdir -p "$PEERS" "$DOWNLOADS"

# 1. FlashInfer and apache-tvm-ffi, downloaded once
DL="pip download -q --no-deps --only-binary=:all: -d $DOWNLOADS"
WHEEL=$DOWNLOADS/flashinfer_python-$FLASHINFER-py3-none-any.whl
[ -f "$WHEEL" ] || $DL "flashinfer-python==$FLASHINFER" 2>&1 | grep -v -i warning || true
[ -f "$WHEEL" ] || { echo "FAIL: $WHEEL was not downloaded"; exit 1; }
tvm_wheel() { ls "$DOWNLOADS"/apache_tvm_ffi-"$TVM_FFI"-cp312-*manylinux*x86_64.whl 2>/dev/null | head -1; }
[ -n "$(tvm_wheel)" ] || $DL --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 "apache-tvm-ffi==$TVM_FFI" 2>&1 \
  | grep -v -i warning || true
TVM_WHEEL=$(tvm_wheel)
[ -n "$TVM_WHEEL" ] || { echo "FAIL: no cp312 manylinux x86_64 wheel of apache-tvm-ffi $TVM_FFI"; exit 1; }
cp "$TVM_WHEEL" "$PEERS/"

# 2. The slim FlashInfer: every Python module kept (`import flashinfer` imports them all), the
# CUDA/C++ source trees of kernels this benchmark never builds left out
python - "$WHEEL" "$PEERS/flashinfer-$FLASHINFER-slim.zip" "$TVM_FFI" <<'PY'
import sys
import zipfile

from packaging.requirements import Requirement

SLIM_OUT = [f"flashinfer/data/csrc/{name}/" for name in
            ("cake_sampling", "cake_dsv4", "kda", "fused_moe", "cake_fmha", "gdn", "experimental")]
SLIM_OUT.append("flashinfer/data/cutlass/examples/")
wheel, out, tvm_ffi = sys.argv[1:]
with zipfile.ZipFile(wheel) as src:
    infos = src.infolist()
    names = [i.filename for i in infos]
    missing = [p for p in SLIM_OUT if not any(n.startswith(p) for n in names)]
    if missing:  # a later FlashInfer moved things: look again at what to leave out
        sys.exit(f"FAIL: not in the wheel: {', '.join(missing)}")
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [line.split(":", 1)[1].strip() for line in src.read(metadata).decode().splitlines()
                if line.startswith("Requires-Dist: apache-tvm-ffi") and "extra ==" not in line]
    for spec in requires:
        if tvm_ffi not in Requirement(spec).specifier:
            sys.exit(f"FAIL: FlashInfer requires {spec}; apache-tvm-ffi {tvm_ffi} does not fit")
    print(f"FlashInfer requires {', '.join(requires)}: apache-tvm-ffi {tvm_ffi} fits")
    kept = dropped = raw = 0
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for info in infos:
            if any(info.filename.startswith(p) for p in SLIM_OUT):
                dropped += info.file_size
                continue
            dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_DEFLATED,
                         compresslevel=9)
            kept += 1
            raw += info.file_size
print(f"slim FlashInfer: {kept} files, {raw / 2**20:.1f} MiB unpacked "
      f"({dropped / 2**20:.1f} MiB of sources left out)")
PY

# 3. The official mini-sglang at 20fcd7f, its bench.py unchanged
mkdir -p "$PEERS/mini-sglang"
git --git-dir="$OFFICIAL_MIRROR" archive "$OFFICIAL_COMMIT" python benchmark | tar -x -C "$PEERS/mini-sglang"
echo "$OFFICIAL_COMMIT" > "$PEERS/mini-sglang/COMMIT"
[ "$(git hash-object "$PEERS/mini-sglang/benchmark/offline/bench.py")" = \
  "$(git --git-dir="$OFFICIAL_MIRROR" rev-parse "$OFFICIAL_COMMIT:benchmark/offline/bench.py")" ] \
  || { echo "FAIL: bench.py differs from $OFFICIAL_COMMIT's"; exit 1; }

# 4. Qwen3-0.6B's config and tokenizer: the bundled offline copy (built here if missing), which
# the device unpacks into .cache/models/ (where MINISGL_CACHE_DIR=.cache finds it)
QWEN=$(PYTHONPATH=$ROOT/python python -c \
  'from minisgl.utils.offline import prepare_qwen3; print(prepare_qwen3())' | tail -1)
[ -f "$QWEN/tokenizer.json" ] && [ -f "$QWEN/config.json" ] || { echo "FAIL: $QWEN is incomplete"; exit 1; }
tar czf "$PEERS/qwen3-0.6b.tgz" -C "$(dirname "$(dirname "$QWEN")")" "Qwen/$(basename "$QWEN")"

# 5. Sizes: what the device call would carry
python - "$PEERS" .cache/wheels "$LIMIT_MIB" "$AIM_MIB" <<'PY'
import os
import subprocess
import sys
from pathlib import Path

peers, wheels, limit, aim = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])


def tree_bytes(folder: str) -> int:
    return sum(f.stat().st_size for f in Path(folder).rglob("*") if f.is_file())


listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                        capture_output=True, check=True).stdout.split(b"\0")
repo = sum(os.path.getsize(n) for n in listed if n and os.path.isfile(n))
for f in sorted(Path(peers).iterdir()):
    size = tree_bytes(str(f)) if f.is_dir() else f.stat().st_size
    print(f"  {size / 2**20:6.2f} MiB  {f}")
parts = {"repository (tracked + untracked, not ignored)": repo, peers: tree_bytes(peers),
         wheels: tree_bytes(wheels)}
for name, size in parts.items():
    print(f"{size / 2**20:6.2f} MiB  {name}")
total = sum(parts.values()) / 2**20
print(f"{total:6.2f} MiB  carried in all (device limit {limit:.0f} MiB, aim <= {aim:.0f})")
if total > limit:
    sys.exit("FAIL: over the device's carry limit")
if total > aim:
    print("WARNING: over the aim: little margin for the repository to grow")
PY
