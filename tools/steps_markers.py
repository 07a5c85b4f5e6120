"""Chapter markers: parse a file's `>>> chNN` / `<<< chNN` blocks and render its text at a chapter.

The rules are in tools/steps.py's docstring and docs/appendix/markers.md. This module knows one
file at a time; which version of a file is in force, and what the tree derives from the rest of
it, are tools/steps_manifest.py's and tools/steps_derive.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class StepsError(Exception):
    """A problem in the manifest or in the markers; the message names file:line where it can."""


@dataclass(frozen=True)
class Cond:
    """A line inside a marker block exists from chapter `chapter` on, or only before it."""

    before: bool
    chapter: int

    def holds(self, n: int) -> bool:
        return n < self.chapter if self.before else n >= self.chapter


@dataclass(frozen=True)
class InVersion:
    """A line of one version of a rewritten file: it exists while its version is in force and,
    inside a marker block of that version, where the marker holds too."""

    first: int
    until: int | None
    marker: Cond | None

    @property
    def before(self) -> bool:  # the line is commented out in its file (see _line_at)
        return self.marker is not None and self.marker.before

    def holds(self, n: int) -> bool:
        in_force = self.first <= n and (self.until is None or n < self.until)
        return in_force and (self.marker is None or self.marker.holds(n))


Condition = Cond | InVersion | None

MARKER = re.compile(r"(>>>|<<<)\s*(before\s+)?ch(\d+)")
LOOKS_LIKE_MARKER = re.compile(r"(>>>|<<<)\s*(before\s|ch\d)")
COMMENTED = re.compile(r"^(\s*)(?:#|//) ?")  # the comment that hides a `before` block's line


def read_marker(line: str, where: str) -> tuple[str, Cond] | None:
    """('>>>' or '<<<', condition) if the line is a marker; raise if it is a malformed one."""
    text = line.strip()
    for prefix in ("#", "//"):
        if text.startswith(prefix):
            body = text[len(prefix) :].strip()
            break
    else:
        return None
    match = MARKER.fullmatch(body)
    if match:
        return match[1], Cond(before=bool(match[2]), chapter=int(match[3]))
    if LOOKS_LIKE_MARKER.match(body):
        raise StepsError(f"{where}: malformed chapter marker {text!r}")
    return None


def parse_markers(text: str, path: str) -> list[tuple[str, Cond | None]]:
    """Pair every non-marker line with the condition of the block it sits in (None: always)."""
    lines: list[tuple[str, Cond | None]] = []
    open_cond, open_at = None, 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        marker = read_marker(line, f"{path}:{number}")
        if marker is None:
            if open_cond is not None and open_cond.before and line.strip() and \
                    not COMMENTED.match(line):
                raise StepsError(
                    f"{path}:{number}: a `before` block's lines must be commented out, "
                    "so that the final engine does not run the older version"
                )
            lines.append((line, open_cond))
            continue
        arrow, cond = marker
        if arrow == ">>>":
            if open_cond is not None:
                raise StepsError(
                    f"{path}:{number}: marker blocks do not nest "
                    f"(the block opened at line {open_at} is still open)"
                )
            open_cond, open_at = cond, number
        elif cond != open_cond:
            opened = f"the open block is from line {open_at}" if open_cond else "no block is open"
            raise StepsError(f"{path}:{number}: closing marker does not match ({opened})")
        else:
            open_cond = None
    if open_cond is not None:
        raise StepsError(f"{path}:{open_at}: marker block is never closed")
    return lines


def apply_markers(lines: list[tuple[str, Condition]], n: int) -> str:
    """The text at chapter n as the markers alone make it; lines of a `before` block that holds
    come back uncommented."""
    return "".join(_line_at(line, cond, n) for line, cond in lines)


def _line_at(line: str, cond: Condition, n: int) -> str:
    if cond is None:
        return line
    if not cond.holds(n):
        return ""
    return COMMENTED.sub(r"\1", line, count=1) if cond.before else line

