#!/usr/bin/env bash
# First command of a call on a fresh device machine, from the repository root: installs what the
# call carried, so that the benchmarks/run_*_gpu.sh scripts find it. Each part is optional:
#   .cache/wheels/*.whl        benchmarks/device_wheels.sh made them; installed --no-deps
#   .cache/cuda_ext_build.tar  chapter 19's extension built on the device earlier (tar of
#                              .cache/cuda_ext); used only while its source digest still matches
#   .cache/triton.tgz          Triton's compiled kernels (tar of .cache/triton, TRITON_CACHE_DIR in
#                              benchmarks/gpu_steps.sh)
#   .cache/peers/qwen3-0.6b.tgz  Qwen3-0.6B's config and tokenizer (benchmarks/peers/prepare.sh),
#                              unpacked into .cache/models for the scripts that run it
# Bring them back at the end of a call with:
#   tar cf $OUT/cuda_ext_build.tar -C .cache cuda_ext; tar czf $OUT/triton.tgz -C .cache triton
set -u
cd "$(dirname "$0")/.."
if compgen -G ".cache/wheels/*.whl" > /dev/null; then
  python -m pip install -q --no-index --no-deps .cache/wheels/*.whl 2>&1 | grep -v -i "warning" || true
fi
# ninja compares the sources' mtimes with the output times in its build log (.ninja_log), not with
# the files': a fresh checkout's sources look newer than any build, so they get an old date (the
# build folder's name is a digest of their content, so an old build never meets changed sources)
[ -f .cache/cuda_ext_build.tar ] && tar xf .cache/cuda_ext_build.tar -C .cache \
  && touch -d 2000-01-01 python/minisgl/kernel/csrc/*
[ -f .cache/triton.tgz ] && tar xzf .cache/triton.tgz -C .cache
[ -f .cache/peers/qwen3-0.6b.tgz ] && [ ! -d .cache/models/Qwen/Qwen3-0.6B ] \
  && mkdir -p .cache/models && tar xzf .cache/peers/qwen3-0.6b.tgz -C .cache/models
python - <<'PY'
import importlib
missing = [m for m in ("zmq", "msgpack", "fastapi", "flashinfer_bench", "matplotlib", "httpx2")
           if importlib.util.find_spec(m) is None]
print("device prepared;", "missing: " + ", ".join(missing) if missing else "nothing missing")
PY
