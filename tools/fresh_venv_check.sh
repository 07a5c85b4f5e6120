#!/usr/bin/env bash
# A new learner's first hour, on this machine: a clean copy of the repository, the README's venv
# and a fresh minisgl cache, the README's first command (set-up, then the server until it serves,
# every output line timestamped), then a chapter check and a judged exercise. Every step must
# reach its verdict with no missing-module error, and the set-up and start-up may never go quiet
# for more than MAX_SILENCE_S seconds (default 15): the longest gaps are printed.
#
#     bash tools/fresh_venv_check.sh [--worktree] [--readme-only] [WORKDIR]
#
#   --worktree      copy the working tree (tracked and untracked files that git does not ignore)
#                   instead of cloning the last commit: checks changes before they are committed
#   --readme-only   stop once the server serves (skip the chapter check and the judge)
#   WORKDIR         keep everything there (default: a new temporary folder, removed after)
#
# Not run by CI (tests/test_fresh_venv.py runs it when MINISGL_RUN_FRESH_VENV=1): it downloads and
# installs every dependency again (torch, transformers, ...) and checks two chapters, many minutes
# on two cores. Its output, run by hand, is kept in benchmarks/results/cpu_fresh_venv_check.txt.
set -euo pipefail
worktree=0
readme_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --worktree) worktree=1; shift ;;
    --readme-only) readme_only=1; shift ;;
    *) break ;;
  esac
done
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/minisgl-fresh-XXXXXX)}"
[ $# -ge 1 ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
max_silence="${MAX_SILENCE_S:-15}"
port="${MINISGL_FRESH_PORT:-19190}"  # not the README's 1919: other servers may hold it
started=$(date +%s)
step() { echo "== [$(( $(date +%s) - started ))s] $*"; }

# Prefix each line with the time and the seconds since the start; \r ends a line too, so a
# progress bar's updates count as output, as on a terminal. Written to stdout and to the log $1.
STAMPER='
import sys, time
start = time.monotonic()
log = open(sys.argv[1], "a", encoding="utf-8")
pending = b""
def emit(raw):
    line = raw.decode(errors="replace")
    now = time.strftime("%H:%M:%S")
    text = f"{now} +{time.monotonic() - start:7.1f}s {line}\n"
    sys.stdout.write(text); sys.stdout.flush(); log.write(text); log.flush()
while chunk := sys.stdin.buffer.read1(65536):
    pending += chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    *lines, pending = pending.split(b"\n")
    for raw in lines:
        if raw.strip():
            emit(raw)
if pending.strip():
    emit(pending)
'
# The longest gaps between consecutive lines of the log $1 (and from its start to the first).
GAPS='
import re, sys
times, lines = [0.0], ["(start)"]
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.match(r"\S+ \+\s*([\d.]+)s (.*)", line)
    if m:
        times.append(float(m.group(1))); lines.append(m.group(2)[:100])
gaps = sorted(((b - a, lines[i + 1]) for i, (a, b) in enumerate(zip(times, times[1:]))),
              reverse=True)
print(f"{len(times) - 1} lines in {times[-1]:.0f} s; the longest gaps between lines:")
for gap, line in gaps[:5]:
    print(f"  {gap:5.1f} s, then: {line}")
limit = float(sys.argv[2])
if gaps and gaps[0][0] > limit:
    sys.exit(f"silent for {gaps[0][0]:.1f} s, more than {limit:g} s")
'

if [ "$worktree" = 1 ]; then
  step "copy the working tree of $repo into $work/minisgl"
  mkdir -p "$work/minisgl"
  (cd "$repo" && git ls-files -z -co --exclude-standard \
    | tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -xf - -C "$work/minisgl"
else
  step "clone $(git -C "$repo" rev-parse --short HEAD) into $work/minisgl"
  git clone -q "$repo" "$work/minisgl"
fi
cd "$work/minisgl"
export MINISGL_CACHE_DIR="$work/cache"  # no converted models, no toolkits, no judge history
unset PYTHONPATH

step "README: python3 -m venv .venv && . .venv/bin/activate"
python3 -m venv .venv && . .venv/bin/activate

log="$work/readme.log"
: >"$log"
step "README: python tools/setup_env.py && python -m minisgl (port $port), until it serves; lines timestamped in $log"
bash -c "python tools/setup_env.py && exec python -m minisgl --port $port" \
  > >(python3 -u -c "$STAMPER" "$log") 2>&1 &
server=$!
for _ in $(seq 3600); do
  grep -q "serving .* on http://" "$log" && break
  kill -0 "$server" 2>/dev/null || { echo "set-up or server exited before serving"; exit 1; }
  sleep 1
done
grep -q "serving .* on http://" "$log" || { echo "no serving line within an hour"; exit 1; }
kill -TERM "$server"
wait "$server" || true
sleep 1  # the stamper writes the server's last lines
grep -m1 -i "fallback\|bundled" "$log" || true
python3 -c "$GAPS" "$log" "$max_silence"

if [ "$readme_only" = 1 ]; then
  step "fresh venv check (README set-up and start-up) passed"
  exit 0
fi

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

if grep -q "No module named" "$log" "$work/check.log"; then
  echo "a missing module in the set-up's, the server's or the check's output"; exit 1
fi
step "fresh venv check passed"
