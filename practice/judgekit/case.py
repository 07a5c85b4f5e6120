"""One test case of an exercise, as the exercise's tests/cases.py builds it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Case:
    """Input and expected result of one call of the learner's function.

    `expected` comes from an independent reference (torch, or a plain Python model written for the
    test), never from the exercise's reference solution. `raises` names an exception class that
    the call must raise instead of returning. Float tensors compare with `atol`/`rtol`
    (|actual - expected| <= atol + rtol * |expected|); everything else compares exactly.

    A CUDA exercise's case gives its test program `args["input"]` (bytes, on stdin) and expects
    exactly the bytes `expected` back; `regions` names spans of them, (start, length, what), so
    that a mismatch can be described by what lies there (e.g. "k_cache slot 7").
    """

    name: str
    args: dict = field(default_factory=dict)
    expected: object = None
    visible: bool = False
    raises: str | None = None
    atol: float = 0.0
    rtol: float = 0.0
    regions: list[tuple[int, int, str]] = field(default_factory=list)
