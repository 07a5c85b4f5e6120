#!/usr/bin/env bash
# Set up a fresh machine and run every test: the README's test command, and what CI runs.
# Installs the Python dependencies, Debian's Chromium for the judge page's browser test, then
# checks each chapter's tree (tools/steps.py check) and runs the whole pytest suite.
set -euo pipefail
cd "$(dirname "$0")/.."

python -m pip install -q -r requirements.txt
python -m pip install -q -r practice/requirements.txt
# FlashInfer-Bench's data model only: its full dependencies pull a 100 MB FlashInfer wheel
python -m pip install -q --no-deps flashinfer-bench==0.1.2 docstring-parser==0.18.0
# the second CUDA toolkit (nvcc 13.4 from PyPI) that chapter 19 compiles with
python tools/check.py --install
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is missing: run 'sudo apt-get install chromium' (the judge page test needs it)"
  fi
fi

python tools/steps.py check
python -m pytest -q "$@"
