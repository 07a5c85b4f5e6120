#!/usr/bin/env bash
# Set up a fresh machine and run every test: the README's test command, and what CI runs.
# Installs the Python dependencies, Debian's Chromium and CJK fonts for the judge page's browser
# test (tools/setup_env.py --tests), then checks each chapter's tree (tools/steps.py check) and
# runs every test file on the final tree (tools/final_tests.py), less the files that the check
# already ran on code the final tree holds unchanged (no test runs twice on identical code).
#
# A chapter or test file whose recorded inputs are unchanged since it passed (the files it read,
# the folders it listed, the installed packages: tools/chapters/proven.json, see
# tools/steps_proof.py) is proven by that record and not run again; `--rerun` runs everything.
# Other arguments go to one plain pytest run over the final tree instead.
set -euo pipefail
cd "$(dirname "$0")/.."

rerun=()
if [[ "${1:-}" == "--rerun" ]]; then
  rerun=(--rerun)
  shift
fi

# the README's set-up (requirements.txt, practice/requirements.txt, FlashInfer-Bench's data model
# without its dependencies), plus nvcc 13.4 from PyPI for chapter 19 and, as root, Debian's
# chromium and fonts-noto-cjk (the Chinese glyphs the judge page's browser test checks)
python tools/setup_env.py --tests

# two chapters, then two test files, side by side where there are two cores (MINISGL_TEST_JOBS
# changes it): much of a test's time is spent waiting on servers and subprocesses
jobs=${MINISGL_TEST_JOBS:-$(( $(nproc) >= 2 ? 2 : 1 ))}

proven=$(mktemp)
trap 'rm -f "$proven"' EXIT
# --timeout: chapter 14's tests take about 10 minutes on a loaded 2-core machine
python tools/steps.py check --jobs "$jobs" --timeout 2400 --record-proven "$proven" \
  ${rerun[@]+"${rerun[@]}"}
if [[ $# -gt 0 ]]; then
  skip=()
  while read -r test; do
    skip+=("--ignore=$test")
  done <"$proven"
  python -m pytest -q ${skip[@]+"${skip[@]}"} "$@"
else
  python tools/final_tests.py --jobs "$jobs" --skip "$proven" ${rerun[@]+"${rerun[@]}"}
fi
