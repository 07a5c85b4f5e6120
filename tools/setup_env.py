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
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Installed without their dependencies (see above); docstring-parser is the one FlashInfer-Bench's
# data model imports that nothing else brings.
NO_DEPS = ["flashinfer-bench==0.1.2", "docstring-parser==0.18.0"]
APT_PACKAGES = ["chromium", "fonts-noto-cjk"]  # the judge page's browser test, with Chinese glyphs
SETUP_COMMAND = "python tools/setup_env.py"


def pip_steps() -> list[list[str]]:
    pip = [sys.executable, "-m", "pip", "install", "-q"]
    return [
        [*pip, "-r", "requirements.txt"],
        [*pip, "-r", "practice/requirements.txt"],
        [*pip, "--no-deps", *NO_DEPS],
    ]


def run(command: list[str]) -> None:
    print("+ " + " ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True)


def install_apt_packages() -> None:
    missing = [p for p in APT_PACKAGES if not _apt_installed(p)]
    if not missing:
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        print(f"not installed: {' '.join(missing)}; the judge page's browser test needs them: "
              f"run `sudo apt-get install -y {' '.join(missing)}`", flush=True)
        return
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
    try:
        for command in pip_steps():
            run(command)
        if args.tests:
            run([sys.executable, "tools/check.py", "--install"])
            install_apt_packages()
    except subprocess.CalledProcessError as e:
        print(f"set-up failed at: {' '.join(e.cmd)} (exit {e.returncode})", file=sys.stderr)
        return 1
    print("set-up done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
