"""`steps.py check` as a learner watches it: pytest's progress (each test file's name, a dot per
test) reaches the screen while the tests run, a step that shows nothing for a while (one long
test, a long main) gets a "still running" line, and the closing lines say in plain words what ran
where and what is left to do.

The streaming tests hold a test (or a main) until the check's own output shows what it must show
by then: if it did not, the held test waits for nothing and fails after its generous timeout.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

from test_steps import PKG, STEPS, make_repo, src, steps

WAIT_S = 120  # how long a held test waits for the check to show progress (generous: CI is slow)


def gated_test(name: str, gate: Path) -> str:
    """A test that passes once the file `gate` exists, and fails after WAIT_S without it."""
    return src(
        "import os",
        "import time",
        "",
        f"def {name}():",
        f"    deadline = time.monotonic() + {WAIT_S}",
        f"    while not os.path.exists({str(gate)!r}):",
        "        assert time.monotonic() < deadline, 'the check showed no progress meanwhile'",
        "        time.sleep(0.05)",
    )


def run_until(command: list[str], release: list[tuple[str, Path | None]], env: dict[str, str],
              timeout: float = 300) -> tuple[int, str]:
    """Run the check; when its output shows each `text` in turn (each after the one before),
    create its `gate` (None: just wait for the text). Returns the exit code and the output."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    seen = bytearray()

    def read() -> None:
        pending, offset = list(release), 0
        while chunk := proc.stdout.read1(4096):
            seen.extend(chunk)
            while pending and (at := seen.find(pending[0][0].encode(), offset)) >= 0:
                offset = at + len(pending[0][0])
                gate = pending.pop(0)[1]
                if gate is not None:
                    gate.touch()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout)
    finally:
        proc.kill()
    reader.join(timeout=30)
    return code, seen.decode(errors="replace")


def _env(tmp_path: Path, heartbeat_s: float | None = None) -> dict[str, str]:
    env = {**os.environ, "MINISGL_CACHE_DIR": str(tmp_path / "cache")}
    if heartbeat_s is not None:
        env["MINISGL_STEPS_HEARTBEAT_S"] = str(heartbeat_s)
    return env


def one_chapter(tmp_path: Path, tests: dict[str, str], main: str | None = None) -> Path:
    files = {PKG + "__init__.py": "", **tests}
    if main is not None:
        files["examples/ch01.py"] = main
    return make_repo(tmp_path / "repo", [{"number": 1, "files": [PKG + "__init__.py"],
                                          "tests": sorted(tests)}], files)


def check_command(root: Path, *numbers: str) -> list[str]:
    return [sys.executable, str(STEPS), "--root", str(root), "check", *numbers]


def test_a_test_files_name_and_dot_show_while_its_next_test_runs(tmp_path):
    # The attack: the learner sees nothing of a chapter's pytest run but dots, and nothing at
    # all while a test runs. The first test's file name and dot must be out (in pytest's own
    # output, under "   | ") while the second test still waits.
    gate = tmp_path / "gate"
    root = one_chapter(tmp_path, {"tests/test_ch01.py": src("def test_quick():", "    pass",
                                                            "", "") + gated_test("test_held", gate)})
    code, out = run_until(check_command(root, "1"), [("   | tests/test_ch01.py .", gate)],
                          _env(tmp_path))
    assert code == 0, out
    assert "tests/test_ch01.py .." in out


def test_a_long_test_gets_a_still_running_line(tmp_path):
    gate = tmp_path / "gate"
    root = one_chapter(tmp_path, {"tests/test_ch01.py": src("def test_quick():", "    pass",
                                                            "", "") + gated_test("test_held", gate)})
    release = [("   | tests/test_ch01.py .", None), ("still running", gate)]
    code, out = run_until(check_command(root, "1"), release, _env(tmp_path, heartbeat_s=0.5))
    assert code == 0, out
    # the note breaks the line of dots and the dots go on under it
    assert re.search(r"   \| tests/test_ch01.py \.\n   \| \.\.\. still running \(\d+s so far\)\n"
                     r"(   \| \.\.\. still running .*\n)*   \| \.", out), out


def test_a_long_main_gets_a_still_running_line_and_its_verdict_a_label(tmp_path):
    gate = tmp_path / "gate"
    main = gated_test("main", gate) + "\nmain()\nprint('main done')\n"
    root = one_chapter(tmp_path, {"tests/test_ch01.py": src("def test_x():", "    pass")}, main)
    code, out = run_until(check_command(root, "1"), [("still running", gate)],
                          _env(tmp_path, heartbeat_s=0.5))
    assert code == 0, out
    assert re.search(r"main +examples/ch01.py \.\.\. \n   \| \.\.\. still running", out), out
    assert re.search(r"\n   main   ok \([\d.]+s\)  main done\n", out), out


def test_progress_shows_in_every_chapter_of_a_run(tmp_path):
    # Two chapters, each holding its last test until the check shows the one before it (under
    # the second file's name): the second chapter's pytest streams as the first one's did.
    gates = [tmp_path / "gate1", tmp_path / "gate2"]
    files = {
        PKG + "__init__.py": "",
        "tests/test_ch01.py": src("def test_one():", "    pass", "", "")
        + gated_test("test_held_one", gates[0]),
        "tests/test_ch02.py": src("def test_two():", "    pass", "", "")
        + gated_test("test_held_two", gates[1]),
    }
    chapters = [{"number": 1, "files": [PKG + "__init__.py"], "tests": ["tests/test_ch01.py"]},
                {"number": 2, "tests": ["tests/test_ch02.py"]}]
    root = make_repo(tmp_path / "repo", chapters, files)
    release = [("   | tests/test_ch01.py .", gates[0]), ("   | tests/test_ch02.py .", gates[1])]
    code, out = run_until(check_command(root), release, _env(tmp_path))
    assert code == 0, out
    assert "2/2 chapters passed" in out


# --------------------------------------------------------------------------------------------
# The closing lines


def test_closing_words_say_nothing_ran_on_the_final_tree_and_nothing_is_left():
    text = " ".join(steps.closing_words(23, [], 30, 12).split())
    assert "In short: all 23 chapters passed, each on its own tree" in text
    assert "This check ran nothing on the final tree." in text
    assert "12 test files read code that later chapters change: `python -m pytest` runs them " \
           "on the final tree" in text
    assert "30 test files read only code that the final tree holds unchanged" in text
    assert text.endswith("Nothing is left for you to do here.")


def test_closing_words_name_what_to_fix_and_the_command_to_rerun():
    text = " ".join(steps.closing_words(3, [2, 3], 1, 0).split())
    assert "1 of 3 chapters passed" in text
    assert "Left for you: fix ch02, ch03 (the failing output is above), then run " \
           "`python tools/steps.py check 2 3` again." in text
    assert "Nothing is left" not in text and "change:" not in text


def test_a_check_ends_with_the_plain_words(tmp_path):
    root = one_chapter(tmp_path, {"tests/test_ch01.py": src("def test_x():", "    pass")})
    done = subprocess.run(check_command(root, "1"),
                          capture_output=True, text=True, timeout=300, env=_env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    tail = " ".join(done.stdout.split("In short:")[-1].split())
    assert tail.startswith("the chapter passed on its own tree"), done.stdout
    assert tail.endswith("Nothing is left for you to do here."), done.stdout
