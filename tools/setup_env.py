#!/usr/bin/env python3
"""Install everything the chapters, their tests and the judge need into this Python.

    python tools/setup_env.py            the README's set-up: every Python package a command needs
    python tools/setup_env.py --tests    ... and what only the test suite needs (tools/run_tests.sh)

The Python packages are three pip runs, because one of them cannot be a line of requirements.txt:

    pip install -r requirements.txt             torch (CPU build), triton, the package itself
    pip install -r practice/requirements.txt    Playwright, for the judge page's browser test
    pip install --no-deps flashinfer-bench ...  FlashInfer-Bench's data model (chapter 19's traces):
                                                with its dependencies it would pull a 100 MB
                                                FlashInfer wheel and a second torch, and pip has
                                                no per-line --no-deps

`--tests` adds the second CUDA toolkit that chapter 19 compiles with (`tools/check.py --install`,
about 350 MB from PyPI) and, as root on Debian, Chromium and the CJK fonts that the browser test
renders Chinese with. Only the standard library is used here: nothing else is installed yet.

Each step says what it installs before it starts, and pip's own lines (each package collected,
downloaded, installed) pass through as they come. pip has long quiet stretches (unpacking torch,
resolving), so whenever a step has shown nothing for HEARTBEAT_S seconds a line says it is still
at work: a set-up never looks hung.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Installed without their dependencies (see above); docstring-parser is the one FlashInfer-Bench's
# data model imports that nothing else brings.
NO_DEPS = ["flashinfer-bench==0.1.2", "docstring-parser==0.18.0"]
NVCC_VERSION = "13.4"  # tools/check.py's PYPI_VERSION, named in the step's line
APT_PACKAGES = ["chromium", "fonts-noto-cjk"]  # the judge page's browser test, with Chinese glyphs
SETUP_COMMAND = "python tools/setup_env.py"
HEARTBEAT_S = 8.0  # the longest a step stays silent: then a line says it is still at work
ALREADY = "Requirement already satisfied:"  # pip's line per package present: counted, not shown


@dataclass(frozen=True)
class Step:
    what: str  # what the step installs, in words, shown before it starts
    command: list[str]


def pip_steps() -> list[Step]:
    # -c requirements.lock: the same version of every package on every machine (see that file)
    pip = [sys.executable, "-m", "pip", "install", "-c", "requirements.lock"]
    return [
        Step("the engine and everything it imports: torch (CPU build), triton, transformers, "
             "FastAPI, ... and minisgl itself, editable (requirements.txt; the first time, torch "
             "alone is a few hundred MB)", [*pip, "-r", "requirements.txt"]),
        Step("Playwright, which drives the browser in the judge page's test "
             "(practice/requirements.txt)", [*pip, "-r", "practice/requirements.txt"]),
        Step("FlashInfer-Bench's data model for chapter 19's traces, without its dependencies",
             [*pip, "--no-deps", *NO_DEPS]),
    ]


def run(command: list[str], heartbeat_s: float = HEARTBEAT_S) -> None:
    """Run a command, passing its output through line by line as it comes; after heartbeat_s
    seconds without a line shown, say that it is still at work. CalledProcessError on failure."""
    print("+ " + " ".join(command), flush=True)
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    lines: queue.Queue[bytes | None] = queue.Queue()

    def read() -> None:
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    started = shown = time.monotonic()
    already = 0
    while (line := _next_line(lines, shown + heartbeat_s)) is not None:
        if line is _QUIET:
            print(f"   ... still at work ({_duration(time.monotonic() - started)} so far)",
                  flush=True)
            shown = time.monotonic()
            continue
        assert isinstance(line, bytes)
        text = line.decode(errors="replace").rstrip("\r\n")
        if text.startswith(ALREADY):
            already += 1
            continue
        print(text, flush=True)
        shown = time.monotonic()
    if already:
        print(f"   ({already} package{'s' * (already != 1)} already installed)", flush=True)
    code = proc.wait()
    if code:
        raise subprocess.CalledProcessError(code, command)


_QUIET = object()  # what _next_line returns when no line came in time


def _next_line(lines: queue.Queue[bytes | None], deadline: float) -> bytes | object | None:
    try:
        return lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        return _QUIET


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds} s"


def install_apt_packages() -> None:
    missing = [p for p in APT_PACKAGES if not _apt_installed(p)]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(f"not installed: {' '.join(missing)}; the judge page's browser test needs them: "
              f"run `sudo apt-get install -y {' '.join(missing)}`", flush=True)
        return
    print(f"== installing {' '.join(missing)} with apt-get (the judge page's browser test)",
          flush=True)
    run(["apt-get", "update", "-qq"])
    run(["apt-get", "install", "-y", "-qq", *missing])


def _apt_installed(package: str) -> bool:
    if shutil.which("dpkg-query") is None:
        return False
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package],
                          capture_output=True, text=True)
    return done.returncode == 0 and "install ok installed" in done.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", action="store_true",
                        help="also the CUDA toolkit, Chromium and CJK fonts the tests use "
                             "(default: off)")
    args = parser.parse_args(argv)
    steps = pip_steps()
    if args.tests:
        steps.append(Step(f"nvcc {NVCC_VERSION} from PyPI for chapter 19's second toolkit "
                          "(about 350 MB, into the minisgl cache)",
                          [sys.executable, "tools/check.py", "--install"]))
    try:
        for n, step in enumerate(steps, start=1):
            print(f"== [{n}/{len(steps)}] installing {step.what}", flush=True)
            run(step.command)
        if args.tests:
            install_apt_packages()
    except subprocess.CalledProcessError as e:
        print(f"set-up failed at: {' '.join(e.cmd)} (exit {e.returncode})", file=sys.stderr)
        return 1
    print("set-up done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
