#!/usr/bin/env bash
# Set up a fresh machine and run every test: the README's test command, and what CI runs.
# Installs the Python dependencies, Debian's Chromium for the judge page's browser test, then
# checks each chapter's tree (tools/steps.py check) and runs the whole pytest suite, less the test
# files that the check already ran on code the final tree holds unchanged (no test runs twice on
# identical code). Arguments go to pytest.
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

proven=$(mktemp)
trap 'rm -f "$proven"' EXIT
python tools/steps.py check --record-proven "$proven"
skip=()
while read -r test; do
  skip+=("--ignore=$test")
done <"$proven"
proven_list=$(paste -sd ' ' "$proven")
echo "pytest skips, unless named in the arguments, the test files that tools/steps.py check" \
  "proved on final code:" \
  "${proven_list:-(none)}"
python -m pytest -q ${skip[@]+"${skip[@]}"} "$@"
