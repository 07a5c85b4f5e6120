"""The learner's first hour, from nothing (issue 17): a fresh venv, the README's set-up, then
`steps.py check 1 19` and a judged exercise, each reaching its verdict with no missing module.

It reinstalls torch and the rest from PyPI and checks two chapters: many minutes on two cores, so
it is in the slow set and runs only when asked (MINISGL_RUN_FRESH_VENV=1). Its last run by hand is
kept in benchmarks/results/cpu_fresh_venv_check.txt.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("MINISGL_RUN_FRESH_VENV") != "1",
                    reason="reinstalls every dependency in a new venv (many minutes): set "
                           "MINISGL_RUN_FRESH_VENV=1 to run it")
def test_readme_setup_then_a_chapter_check_and_a_judged_exercise(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "tools" / "fresh_venv_check.sh"), str(tmp_path)],
                          capture_output=True, text=True, timeout=4 * 3600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "No module named" not in log, log[-4000:]
