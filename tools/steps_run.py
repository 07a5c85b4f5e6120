"""Run one step of a check (a main, or pytest over a chapter's tests) and show it as it runs."""

from __future__ import annotations

import codecs
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class StepResult:
    ok: bool
    seconds: float
    output: str
    broke_line: bool = False  # a heartbeat ended the line the step's label was printed on


# A step that has shown nothing for this long gets a line saying it still runs (a single test or
# main can take a minute on two cores); MINISGL_STEPS_HEARTBEAT_S changes it (the tests do).
HEARTBEAT_S = 10.0


def heartbeat_seconds() -> float:
    try:
        return float(os.environ.get("MINISGL_STEPS_HEARTBEAT_S", HEARTBEAT_S))
    except ValueError:
        return HEARTBEAT_S


def run_step(command: list[str], cwd: Path, env: dict[str, str], timeout: float,
             echo: bool = False, label: str | None = None) -> StepResult:
    """Run one main or test command; with `echo`, show its output as it comes (pytest's dots are
    the per-test progress), each line indented under the chapter. Either way, a line says the
    step still runs whenever nothing was shown for heartbeat_seconds(). With `label` (steps run
    side by side, so no line is left open for them), that line names the step."""
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    chunks: list[bytes] = []
    # Without echo the step's label line is still open ("main  examples/ch01.py ... "), unless
    # the step runs beside others and its notes carry its label instead.
    shown = _Echo(show=echo, at_line_start=echo or label is not None, label=label)

    def pump() -> None:
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            chunks.append(chunk)
            shown.write(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    quiet_s, deadline = heartbeat_seconds(), start + timeout
    timed_out = False
    while proc.poll() is None:
        if time.monotonic() >= deadline:
            proc.kill()
            timed_out = True
            break
        try:
            proc.wait(timeout=min(1.0, max(0.01, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            if shown.quiet_for() >= quiet_s:
                shown.note(f"... still running ({duration(time.monotonic() - start)} so far)")
    proc.wait()
    reader.join(timeout=5)  # a grandchild that keeps the pipe open must not hang the check
    shown.end()
    output = b"".join(chunks).decode(errors="replace")
    seconds = time.monotonic() - start
    if timed_out:
        return StepResult(False, seconds, output + f"\n(timed out after {timeout}s)",
                          shown.broke_line)
    return StepResult(proc.returncode == 0, seconds, output, shown.broke_line)


class _Echo:
    """Writes a child's output to our stdout as it arrives, `   | ` at the start of each line
    (with `show`; else it only keeps the time), and the notes of a step that is quiet."""

    def __init__(self, show: bool = True, at_line_start: bool = True,
                 label: str | None = None) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.show = show
        self.label = label
        # where this step's lines go: the caller's stdout, resolved now, in the caller's thread
        # (the pump thread writes too; steps_check gives each chapter run side by side its own)
        self.out = getattr(sys.stdout, "for_this_thread", lambda: sys.stdout)()
        self.at_line_start = at_line_start
        self.broke_line = False
        self.last_shown = time.monotonic()
        self.lock = threading.Lock()  # the pump thread writes, the waiting thread notes

    def write(self, chunk: bytes) -> None:
        if not self.show:
            return
        text = self.decoder.decode(chunk)
        out = []
        for piece in text.splitlines(keepends=True):
            if self.at_line_start:
                out.append("   | ")
            out.append(piece)
            self.at_line_start = piece.endswith(("\n", "\r"))
        with self.lock:
            self.out.write("".join(out))
            self.out.flush()
            if out:
                self.last_shown = time.monotonic()

    def quiet_for(self) -> float:
        return time.monotonic() - self.last_shown

    def note(self, text: str) -> None:
        """A line of our own: on a line of its own, even in the middle of a line of dots."""
        with self.lock:
            if not self.at_line_start:
                self.out.write("\n")
                self.broke_line = True
            self.out.write(f"   | {self.label}: {text}\n" if self.label else f"   | {text}\n")
            self.out.flush()
            self.at_line_start = True
            self.last_shown = time.monotonic()

    def end(self) -> None:
        if self.show and not self.at_line_start:
            self.out.write("\n")
            self.out.flush()


def duration(seconds: float) -> str:
    """4s, or 2m05s."""
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def indent(text: str) -> str:
    """Text shown under a chapter's line, as the steps' own output is."""
    return "\n".join("   | " + line for line in text.splitlines())
