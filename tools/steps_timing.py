"""How long each step took the last time, and where a check stands: the estimate of what is left."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from steps_run import duration


def timings_path() -> Path:
    """<cache>/steps/timings.json; the cache folder as minisgl.env finds it (without importing
    minisgl, which check keeps out of this process's way)."""
    cache = os.environ.get("MINISGL_CACHE_DIR")
    if cache:
        return Path(cache).expanduser() / "steps" / "timings.json"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "minisgl" / "steps" / "timings.json"


def _read_timings() -> dict[str, dict[str, float]]:
    try:
        data = json.loads(timings_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {root: {k: float(v) for k, v in steps.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0}
            for root, steps in data.items() if isinstance(steps, dict)}


def load_timings(root: Path) -> dict[str, float]:
    """Seconds per step ("ch03 main", "ch03 tests") of the repository at `root`, as measured
    the last time each step ran there."""
    return _read_timings().get(str(root), {})


def save_timing(root: Path, step: str, seconds: float) -> None:
    """Remember one step's time (merged into the file at once, so a stopped run keeps it);
    repositories that no longer exist (a test's temporary ones) are dropped."""
    path = timings_path()
    data = {r: steps for r, steps in _read_timings().items() if Path(r).is_dir()}
    data.setdefault(str(root), {})[step] = round(seconds, 1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache costs the estimate, not the check


@dataclass
class Progress:
    """Where a check stands: the chapters to run, time so far, and the estimate of what is left
    from the previous run's timings (steps never timed before are counted and named as such)."""

    root: Path  # the repository checked: timings are kept per repository
    steps: list[str]  # every step of the run, in order: "ch01 main", "ch01 tests", ...
    previous: dict[str, float]
    started: float = field(default_factory=time.monotonic)
    done: set[str] = field(default_factory=set)

    def finish(self, step: str, seconds: float) -> None:
        self.done.add(step)
        save_timing(self.root, step, seconds)

    def line(self) -> str:
        left = [step for step in self.steps if step not in self.done]
        known = [self.previous[step] for step in left if step in self.previous]
        text = f"{duration(time.monotonic() - self.started)} so far"
        if not left:
            return text
        if known:
            text += f", about {duration(sum(known))} left"
        unknown = len(left) - len(known)
        if unknown:
            text += f" ({unknown} step{'s' * (unknown > 1)} never timed here before)"
        elif known:
            text += " (from the last run's timings)"
        return text
