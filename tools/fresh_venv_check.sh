#!/usr/bin/env bash
# A new learner's first hour, on this machine: a clean clone of the committed tree, a fresh venv
# and a fresh minisgl cache, the README's first command, then a chapter check and a judged
# exercise. Every step must reach its verdict with no missing-module error.
#
#     bash tools/fresh_venv_check.sh [WORKDIR]      (default: a new temporary folder, removed after)
#
# Not run by CI (tests/test_fresh_venv.py runs it when MINISGL_RUN_FRESH_VENV=1): it downloads and installs every dependency again (torch, transformers, ...) and
# checks two chapters, many minutes on two cores. Its output, run by hand, is kept in
# benchmarks/results/cpu_fresh_venv_check.txt.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
  sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
  exit 0
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/minisgl-fresh-XXXXXX)}"
[ $# -ge 1 ] || trap 'rm -rf "$work"' EXIT
started=$(date +%s)
step() { echo "== [$(( $(date +%s) - started ))s] $*"; }

step "clone $(git -C "$repo" rev-parse --short HEAD) into $work/minisgl"
git clone -q "$repo" "$work/minisgl"
cd "$work/minisgl"
python3 -m venv "$work/venv"
source "$work/venv/bin/activate"
export MINISGL_CACHE_DIR="$work/cache"  # no converted models, no toolkits, no judge history
unset PYTHONPATH

step "README: python tools/setup_env.py"
python tools/setup_env.py

step "README: python -m minisgl (until /health answers, then SIGTERM)"
python -m minisgl --port 19190 >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 600); do
  if python - <<'EOF' 2>/dev/null; then break; fi
import json, urllib.request
print("health:", json.load(urllib.request.urlopen("http://127.0.0.1:19190/health", timeout=2)))
EOF
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log"; echo "server exited"; exit 1; }
  sleep 1
done
kill -TERM "$server"
wait "$server" || true
grep -m1 -i "model\|fallback\|bundled" "$work/server.log" || true

step "python tools/steps.py check 1 19 --timeout 1800"
python tools/steps.py check 1 19 --timeout 1800 2>&1 | tee "$work/check.log"  # a busy machine is slow
[ "${PIPESTATUS[0]}" = 0 ] || { echo "steps.py check failed"; exit 1; }

step "python practice/judge.py 401 practice/exercises/401-*/starter.py (expected: WA or RE, exit 1)"
set +e
python practice/judge.py 401 practice/exercises/401-*/starter.py | tail -3
judged=${PIPESTATUS[0]}
set -e
[ "$judged" = 1 ] || { echo "judge exit status $judged, expected 1 (a verdict that is not AC)"; exit 1; }
python practice/judge.py --progress

if grep -q "No module named" "$work/server.log" "$work/check.log"; then
  echo "a missing module in the server's or the check's output"; exit 1
fi
step "fresh venv check passed"
