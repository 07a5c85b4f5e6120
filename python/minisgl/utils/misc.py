"""Arithmetic helpers and the engine's one user-facing error type."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class MinisglError(Exception):
    """An error caused by the user's input (a bad path, a broken model file, a bad flag).

    Entry points catch it and print one line instead of a traceback, because the message already
    names the cause and what to do about it.
    """


def run_main(main: Callable[[], T]) -> T:
    """Run a command-line entry point and return what it returns: a MinisglError becomes one line
    on stderr and exit code 1, because its message already says what went wrong (a traceback
    would only bury it)."""
    try:
        return main()
    except MinisglError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)


def cdiv(a: int, b: int) -> int:
    """Ceiling division: how many pages of size b hold a tokens."""
    return -(a // -b)


def div_exact(a: int, b: int) -> int:
    """a / b when b divides a; anything else is a configuration bug worth stopping for."""
    if a % b != 0:
        raise ValueError(f"{a} is not divisible by {b}")
    return a // b
