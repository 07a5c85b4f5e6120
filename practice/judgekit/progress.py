"""The learner's progress: every judged submission, in a SQLite database under the cache folder.

    $MINISGL_CACHE_DIR/practice.sqlite3     (default ~/.cache/minisgl/practice.sqlite3)

One row per submission: exercise id, when, how many cases passed out of how many, the verdict of
every case (a JSON list such as ["AC", "WA"]), where it came from (cli or web) and the source the
learner submitted, so that an earlier attempt can be reopened. An exercise is passed once any of its
submissions passed every case. The judge runs the learner's code in a sandbox that cannot reach
this folder; only the judging process writes here.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    exercise INTEGER NOT NULL,
    submitted_at TEXT NOT NULL,
    passed INTEGER NOT NULL,
    total INTEGER NOT NULL,
    verdicts TEXT NOT NULL,
    origin TEXT NOT NULL,
    source TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS submissions_by_exercise ON submissions (exercise, id);
"""
ORIGINS = ("cli", "web")


def database_path() -> Path:
    """Where the database lives. The same cache folder as minisgl.env, without importing minisgl
    (the judge runs before the engine's package exists in the learner's tree)."""
    cache = os.environ.get("MINISGL_CACHE_DIR")
    if cache:
        return Path(cache).expanduser() / "practice.sqlite3"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "minisgl" / "practice.sqlite3"


def _connect() -> sqlite3.Connection:
    path = database_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, timeout=30)  # a CLI run and the page may write at once
    conn.executescript(SCHEMA)
    return conn


@dataclass(frozen=True)
class Submission:
    id: int
    exercise: int
    submitted_at: str  # local time, ISO 8601 to the second
    passed: int
    total: int
    verdicts: list[str]
    origin: str
    source: str = ""  # empty in listings; submission(id) fills it

    @property
    def ok(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def to_json(self) -> dict:
        return {"id": self.id, "exercise": self.exercise, "submitted_at": self.submitted_at,
                "passed": self.passed, "total": self.total, "verdicts": self.verdicts,
                "origin": self.origin, "ok": self.ok}


def record(exercise_id: int, verdicts: list[str], source: str, origin: str) -> int:
    """Keep one judged submission; returns its id."""
    if origin not in ORIGINS:
        raise ValueError(f"origin must be one of {ORIGINS}, not {origin!r}")
    passed = sum(v == "AC" for v in verdicts)
    with _connect() as conn:
        cursor = conn.execute(
            "INSERT INTO submissions (exercise, submitted_at, passed, total, verdicts, origin, "
            "source) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (int(exercise_id), time.strftime("%Y-%m-%dT%H:%M:%S"), passed, len(verdicts),
             json.dumps(list(verdicts)), origin, source),
        )
        return int(cursor.lastrowid)


def _row(row: tuple, with_source: bool = False) -> Submission:
    sid, exercise, at, passed, total, verdicts, origin, *source = row
    return Submission(sid, exercise, at, passed, total, json.loads(verdicts), origin,
                      source[0] if with_source else "")


def submissions(exercise_id: int, limit: int = 50) -> list[Submission]:
    """The latest submissions of one exercise, newest first, without their source."""
    with _connect() as conn:
        rows = conn.execute(
            "SELECT id, exercise, submitted_at, passed, total, verdicts, origin FROM submissions "
            "WHERE exercise = ? ORDER BY id DESC LIMIT ?", (int(exercise_id), int(limit))
        ).fetchall()
    return [_row(r) for r in rows]


def submission(submission_id: int) -> Submission | None:
    """One submission with its source, or None."""
    with _connect() as conn:
        row = conn.execute(
            "SELECT id, exercise, submitted_at, passed, total, verdicts, origin, source "
            "FROM submissions WHERE id = ?", (int(submission_id),)
        ).fetchone()
    return _row(row, with_source=True) if row else None


@dataclass(frozen=True)
class ExerciseStatus:
    attempts: int
    passed: bool  # some submission passed every case
    best: str  # the best result, "passed/total", "" before the first attempt
    last_at: str  # when it was last judged, "" before the first attempt


def statuses() -> dict[int, ExerciseStatus]:
    """Per exercise id that has a submission: attempts, passed, best result, last time."""
    with _connect() as conn:
        rows = conn.execute(
            "SELECT exercise, COUNT(*), MAX(total > 0 AND passed = total), "
            "MAX(passed * 1.0 / MAX(total, 1)), MAX(submitted_at) FROM submissions "
            "GROUP BY exercise"
        ).fetchall()
        best = dict(conn.execute(
            "SELECT exercise, passed || '/' || total FROM submissions AS s WHERE id = ("
            "SELECT id FROM submissions WHERE exercise = s.exercise "
            "ORDER BY passed * 1.0 / MAX(total, 1) DESC, id DESC LIMIT 1)"
        ).fetchall())
    return {ex: ExerciseStatus(n, bool(ok), best.get(ex, ""), last) for ex, n, ok, _, last in rows}


def passed_ids() -> set[int]:
    return {ex for ex, status in statuses().items() if status.passed}
