#!/usr/bin/env bash
# Set up a fresh machine and run every test: the README's test command, and what CI runs.
# Installs the Python dependencies, Debian's Chromium and CJK fonts for the judge page's browser
# test (tools/setup_env.py --tests), then checks each chapter's tree (tools/steps.py check) and
# runs the whole pytest suite, less the test files that the check already ran on code the final
# tree holds unchanged (no test runs twice on identical code). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

# the README's set-up (requirements.txt, practice/requirements.txt, FlashInfer-Bench's data model
# without its dependencies), plus nvcc 13.4 from PyPI for chapter 19 and, as root, Debian's
# chromium and fonts-noto-cjk (the Chinese glyphs the judge page's browser test checks)
python tools/setup_env.py --tests

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
