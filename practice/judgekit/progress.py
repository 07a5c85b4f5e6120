"""Which exercises the learner has passed: practice/workspace/progress.json (git-ignored)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time

from .exercises import workspace_root

_lock = threading.Lock()


def _path():
    return workspace_root() / "progress.json"


def load() -> dict:
    try:
        data = json.loads(_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def passed_ids() -> set[int]:
    return {int(k) for k, v in load().items() if isinstance(v, dict) and v.get("passed")}


def record(exercise_id: int, passed: int, total: int) -> None:
    """Remember the latest result; once passed, an exercise stays passed."""
    with _lock:
        data = load()
        entry = data.get(str(exercise_id)) if isinstance(data.get(str(exercise_id)), dict) else {}
        entry = {
            "passed": bool(entry.get("passed")) or (total > 0 and passed == total),
            "last": f"{passed}/{total}",
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        data[str(exercise_id)] = entry
        folder = _path().parent
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".progress-", suffix=".json")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, indent=2)
        os.replace(tmp, _path())
