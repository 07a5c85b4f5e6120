"""tools/setup_env.py never looks hung: it says what each step installs, passes pip's lines
through as they come, and says it is still at work after HEARTBEAT_S seconds of silence.

A fresh set-up ran 61 s with no output at all (pip -q). The heartbeat tests hold a quiet child
until setup_env's output shows the heartbeat, so they wait for the event, not for a time.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import setup_env  # noqa: E402

WAIT_S = 120  # how long a quiet child waits for the heartbeat (generous: CI is slow)


def quiet_child(gate: Path, before: str = "started", after: str = "finished") -> str:
    """Python code that prints `before`, stays silent until `gate` exists, then prints `after`."""
    return (f"import os, sys, time\nprint({before!r}, flush=True)\n"
            f"deadline = time.monotonic() + {WAIT_S}\n"
            f"while not os.path.exists({str(gate)!r}):\n"
            f"    if time.monotonic() > deadline: sys.exit('no heartbeat came')\n"
            f"    time.sleep(0.05)\n"
            f"print({after!r}, flush=True)\n")


def script(tmp_path: Path, code: str) -> list[str]:
    """The command that runs `code` from a file (so setup_env's "+ command" line is one line)."""
    path = tmp_path / "child.py"
    path.write_text(code)
    return [sys.executable, str(path)]


def run_through_setup_env(child: list[str], gate: Path, heartbeat_s: float,
                          release_on: str) -> subprocess.CompletedProcess:
    """setup_env.run(child) in a process of its own; `gate` is created when its output shows
    `release_on`."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'tools')!r}); import setup_env\n"
            f"setup_env.run({child!r}, heartbeat_s={heartbeat_s})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    seen = bytearray()

    def read() -> None:
        while chunk := proc.stdout.read1(4096):
            seen.extend(chunk)
            if release_on.encode() in seen:
                gate.touch()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        returncode = proc.wait(timeout=WAIT_S + 60)
    finally:
        proc.kill()
    reader.join(timeout=30)
    return subprocess.CompletedProcess(proc.args, returncode, seen.decode(errors="replace"))


def test_a_quiet_step_says_it_is_still_at_work(tmp_path):
    gate = tmp_path / "gate"
    child = script(tmp_path, quiet_child(gate))
    done = run_through_setup_env(child, gate, 0.5, "still at work")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    at = lines.index("started")
    assert "still at work" in lines[at + 1] and lines[-1] == "finished", done.stdout


def test_a_step_silent_from_its_start_says_so_too(tmp_path):
    # no line at all before the silence (pip resolving before its first line)
    gate = tmp_path / "gate"
    code = quiet_child(gate).replace("print('started', flush=True)\n", "")
    done = run_through_setup_env(script(tmp_path, code), gate, 0.5, "still at work")
    assert done.returncode == 0, done.stdout
    assert "still at work" in done.stdout.splitlines()[1], done.stdout  # after the "+ " line


def test_a_child_writing_partial_lines_is_not_mistaken_for_progress(tmp_path):
    # A child that writes no newline for a long while (a progress bar redrawn with \r, or
    # nothing): the heartbeat still comes, and the partial text is shown once it ends.
    gate = tmp_path / "gate"
    code = quiet_child(gate).replace("print('started', flush=True)",
                                     "sys.stdout.write('working\\r'); sys.stdout.flush()")
    done = run_through_setup_env(script(tmp_path, code), gate, 0.5, "still at work")
    assert done.returncode == 0, done.stdout
    assert "still at work" in done.stdout and "finished" in done.stdout


def test_failing_step_raises_with_its_command():
    with pytest.raises(subprocess.CalledProcessError) as e:
        setup_env.run([sys.executable, "-c", "import sys; print('x'); sys.exit(3)"])
    assert e.value.returncode == 3


def test_already_installed_packages_are_counted_not_listed(tmp_path, capfd):
    lines = [f"Requirement already satisfied: pkg{i} in /site" for i in range(40)]
    code = "\n".join(["print('Collecting torch')", *(f"print({line!r})" for line in lines)])
    setup_env.run(script(tmp_path, code))
    out = capfd.readouterr().out
    assert "Collecting torch" in out and "already satisfied" not in out
    assert "(40 packages already installed)" in out


def test_pip_runs_unquiet_and_each_step_says_what_it_installs():
    for step in setup_env.pip_steps():
        assert "-q" not in step.command and "--quiet" not in step.command, step
        assert len(step.what) > 20, step


def test_main_names_each_step_before_it_runs(monkeypatch, capsys):
    ran: list[list[str]] = []
    monkeypatch.setattr(setup_env, "run", lambda command, *a, **k: ran.append(command))
    monkeypatch.setattr(setup_env, "install_apt_packages", lambda: None)
    assert setup_env.main(["--tests"]) == 0
    out = capsys.readouterr().out.splitlines()
    headers = [line for line in out if line.startswith("== [")]
    assert len(headers) == len(ran) == 4
    assert headers[0].startswith("== [1/4] installing the engine") and "torch" in headers[0]
    assert "nvcc" in headers[3] and ran[3][-2:] == ["tools/check.py", "--install"]
    assert out[-1] == "set-up done"


def _names(lines: list[str]) -> set[str]:
    """Package names of requirement lines (comments, options and `-e .[test]` left out)."""
    import re

    names = set()
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[<>=!~;\[ ]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def test_every_pip_run_takes_the_lock_and_the_lock_pins_every_requirement():
    import tomllib

    for step in setup_env.pip_steps():
        assert step.command[3:6] == ["install", "-c", "requirements.lock"], step.command
    lock = (ROOT / "requirements.lock").read_text().splitlines()
    pins = [line for line in lock if line and not line.startswith("#")]
    assert all(line.count("==") == 1 for line in pins), pins  # one exact version each
    pinned = {line.split("==")[0] for line in pins}
    assert len(pinned) == len(pins)  # no package twice
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _names(project["dependencies"] + project["optional-dependencies"]["test"])
    for file in ("requirements.txt", "practice/requirements.txt"):
        wanted |= _names((ROOT / file).read_text().splitlines())
    assert wanted - pinned == set()
    # the lock's own pins agree with the exact pins of requirements.txt (torch's CPU build aside)
    exact = {line.split("==")[0].lower(): line.split("==")[1]
             for line in (ROOT / "requirements.txt").read_text().splitlines() if "==" in line}
    for name, version in exact.items():
        assert f"{name}=={version}" in pins or f"{name}=={version}+cpu" in pins, name
