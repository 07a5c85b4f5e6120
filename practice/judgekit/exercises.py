"""Exercises on disk: practice/exercises/<id>-<slug>/meta.toml and what sits beside it.

An exercise folder holds
    meta.toml         id, chapter, title, difficulty, language, file names, limits, aliases
    statement.md      the statement (Chinese Markdown)
    starter.<ext>     the learner's starting point (copied to the workspace on first use)
    tests/cases.py    cases(): the test cases, expected values from an independent reference
    .reference/       the reference solution (for CI; never sent to the learner's page)
`chapter` in meta.toml is the source of truth for which chapter an exercise belongs to.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

PRACTICE = Path(__file__).resolve().parent.parent
EXERCISES = PRACTICE / "exercises"
LANGUAGES = ("python", "cuda")
DIFFICULTIES = ("简单", "中等", "困难")


def workspace_root() -> Path:
    """Where the learner's working copies live (git-ignored)."""
    return Path(os.environ.get("MINISGL_PRACTICE_WORKSPACE", PRACTICE / "workspace"))


@dataclass(frozen=True)
class Exercise:
    id: int
    chapter: int
    slug: str
    title: str
    difficulty: str
    language: str
    file: str  # the learner's file name, e.g. solution.py
    starter: str  # the starter file inside the exercise folder
    entry: str  # the function the tests call (python); unused for cuda
    time_limit_s: float  # CPU seconds per case
    memory_mb: int  # address-space limit of the learner's process
    max_processes: int  # processes + threads the learner's program may have at once
    output_mb: int  # largest file (stdout included) the program may write
    dir: Path
    aliases: tuple[int, ...] = ()  # older ids that still name this exercise (202 is now 1901)

    @property
    def label(self) -> str:
        return f"{self.id}. {self.title}（{self.difficulty}）"

    @property
    def starter_path(self) -> Path:
        return self.dir / self.starter

    @property
    def reference_path(self) -> Path:
        return self.dir / ".reference" / self.file

    def statement(self) -> str:
        return (self.dir / "statement.md").read_text(encoding="utf-8")

    def starter_code(self) -> str:
        return self.starter_path.read_text(encoding="utf-8")

    def load_cases(self) -> list:
        """Import tests/cases.py and return its cases() (visible examples first)."""
        path = self.dir / "tests" / "cases.py"
        name = f"_minisgl_practice_cases_{self.id}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return list(module.cases())

    def workspace_file(self, create: bool = True) -> Path:
        """The learner's working copy, created from the starter on first use."""
        path = workspace_root() / str(self.id) / self.file
        if create and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.starter_path, path)
        return path


def load_exercise(folder: Path) -> Exercise:
    with open(folder / "meta.toml", "rb") as f:
        meta = tomllib.load(f)
    ex = Exercise(
        id=int(meta["id"]),
        chapter=int(meta["chapter"]),
        slug=str(meta["slug"]),
        title=str(meta["title"]),
        difficulty=str(meta["difficulty"]),
        language=str(meta["language"]),
        file=str(meta["file"]),
        starter=str(meta["starter"]),
        entry=str(meta.get("entry", "")),
        time_limit_s=float(meta.get("time_limit_s", 2.0)),
        memory_mb=int(meta.get("memory_mb", 2048)),
        max_processes=int(meta.get("max_processes", 32)),
        output_mb=int(meta.get("output_mb", 8)),
        dir=folder,
        aliases=tuple(int(a) for a in meta.get("aliases", [])),
    )
    if folder.name != f"{ex.id}-{ex.slug}":
        raise ValueError(f"{folder}: folder must be named {ex.id}-{ex.slug}")
    if ex.language not in LANGUAGES or ex.difficulty not in DIFFICULTIES:
        raise ValueError(f"{folder}: bad language or difficulty in meta.toml")
    if not re.fullmatch(r"[A-Za-z0-9_]+\.(py|cu|cuh)", ex.file):
        raise ValueError(f"{folder}: bad learner file name {ex.file!r}")
    return ex


def list_exercises(root: Path = EXERCISES) -> list[Exercise]:
    """Every exercise under root, sorted by chapter then id."""
    found = [load_exercise(p.parent) for p in sorted(Path(root).glob("*/meta.toml"))]
    return sorted(found, key=lambda e: (e.chapter, e.id))


def by_chapter(root: Path = EXERCISES) -> dict[int, list[Exercise]]:
    """Exercises grouped by chapter number, chapters in order."""
    groups: dict[int, list[Exercise]] = {}
    for ex in list_exercises(root):
        groups.setdefault(ex.chapter, []).append(ex)
    return groups


def chapter_titles() -> dict[int, str]:
    """Chapter number -> title, from the course's manifest (tools/chapters.toml) when it is here."""
    try:
        with open(PRACTICE.parent / "tools" / "chapters.toml", "rb") as f:
            data = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return {int(c["number"]): str(c.get("title", "")) for c in data.get("chapter", [])
            if "number" in c}


def find_exercise(exercise_id: int | str, root: Path = EXERCISES) -> Exercise | None:
    """The exercise with this id, or with this old id (an alias)."""
    wanted = str(exercise_id).strip()
    exercises = list_exercises(root)
    for ex in exercises:
        if str(ex.id) == wanted:
            return ex
    for ex in exercises:
        if wanted in {str(a) for a in ex.aliases}:
            return ex
    return None
