#!/usr/bin/env bash
# The packages the H200 device image lacks, as wheels in .cache/wheels/ (git-ignored), made on
# this machine (the device reaches no package index). Run here, then carry .cache/wheels and run
# `bash benchmarks/device_prep.sh` first on the device:
#
#   bash benchmarks/device_wheels.sh            # everything (~65 MB with sglang-router)
#   bash benchmarks/device_wheels.sh --no-plot  # without matplotlib (~41 MB: carry limit is 64 MB)
#
# The image has python 3.12, torch, triton, transformers and numpy; `LLM` imports zmq (chapter 17),
# the trace steps need flashinfer-bench (installed --no-deps, its data model only), serving needs
# fastapi/uvicorn/..., the benchmarks' plots need matplotlib, chapter 25 xgrammar and jsonschema.
set -euo pipefail
cd "$(dirname "$0")/.."
PKGS="pyzmq msgpack psutil pydantic fastapi uvicorn prometheus-client setproctitle openai httpx2 pexpect
      jsonschema"
[ "${1:-}" = "--no-plot" ] || PKGS="$PKGS matplotlib"
DL="pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .cache/wheels"
mkdir -p .cache/wheels
$DL $PKGS
$DL --no-deps flashinfer-bench==0.1.2 docstring-parser==0.18.0
# structured output (chapter 25); --no-deps: xgrammar's own dependencies are torch, triton, ...
$DL --no-deps xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
# several servers behind SGLang's router (chapter 27): the Rust router (31 MB) and what its
# launcher imports (aiohttp, orjson)
$DL sglang-router==0.3.2
rm -f .cache/wheels/numpy-*.whl  # the image's own numpy stays
du -sh .cache/wheels
