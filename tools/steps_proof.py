"""Proof by record: a chapter whose inputs have not changed since it passed need not run again.

`steps.py check` records, for each chapter whose main and tests pass, what that run read: every
file of the chapter's tree that a Python process opened or looked for (with its SHA-256, or
"absent"), every folder of the tree whose entries it listed (a digest of the sorted names), and
the environment it ran in (Python, machine, compiler, every installed distribution's version).
The record lives in the repository (`tools/chapters/proven.json`), so a clean clone carries it.

A later check of the same chapter first builds the tree, then compares: when the environment is
the same and every recorded file and folder is the same in the new tree, the run would read
exactly what the passing run read, so it would do exactly what it did. The chapter is then
*proven by record* and skipped; anything missing or different makes it run (and, when it passes,
rewrites its entry). Nothing but a passing run writes an entry.

What the record cannot see, and why that is safe enough:
- reads by non-Python programs (a compiler reading headers): steps.py counts every C/CUDA file of
  the tree as read as soon as one is (see NATIVE there);
- inputs outside the tree (installed packages, the compiler): the environment is part of the
  record; the model caches under ~/.cache are built by the tree's own code from pinned wheels.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

RECORD = "tools/chapters/proven.json"
ABSENT = "absent"


def file_digest(path: Path) -> str:
    if not path.is_file():
        return ABSENT
    return hashlib.sha256(path.read_bytes()).hexdigest()


def names_digest(names: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(names)).encode("utf-8", "surrogateescape")).hexdigest()


def listing_digest(folder: Path) -> str:
    """The names a listing of `folder` returns: adding or removing a file changes it."""
    if not folder.is_dir():
        return ABSENT
    return names_digest([entry.name for entry in folder.iterdir()])


def _version_of(program: str) -> str:
    """The first line of `program --version`, or "none" where it is not installed."""
    try:
        done = subprocess.run([program, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "none"
    return done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout else "none"


def environment() -> dict[str, str]:
    """What outside the tree decides how its code runs. minisgl itself is left out: the tree is
    its code, and an editable install of the repository is hidden from the tree's processes."""
    env = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "machine": platform.machine(),
        "system": platform.system(),
        "kernel": platform.release(),  # the judge's sandbox uses its cgroups, Landlock, seccomp
        "g++": _version_of("g++"),  # the CPU emulator's compiler (chapter 19)
        "chromium": _version_of("chromium"),  # the judge page's browser test
    }
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name and name != "minisgl":
            env[f"pkg {name}"] = dist.version
    return dict(sorted(env.items()))


def env_digest(env: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()


@dataclass
class Snapshot:
    """Every file and folder of a freshly built tree, as digests: taken before anything runs in
    it, since tests may write into the tree."""

    files: dict[str, str]
    folders: dict[str, str]

    @classmethod
    def of(cls, tree: Path) -> Snapshot:
        files, folders = {}, {"": listing_digest(tree)}
        for path in tree.rglob("*"):
            relative = path.relative_to(tree).as_posix()
            if path.is_dir():
                folders[relative] = listing_digest(path)
            elif path.is_file():
                files[relative] = file_digest(path)
        return cls(files, folders)


@dataclass
class Inputs:
    """What one passing run of a chapter read, as digests over the chapter's tree."""

    files: dict[str, str] = field(default_factory=dict)  # path in the tree -> sha256 | "absent"
    folders: dict[str, str] = field(default_factory=dict)  # folder in the tree -> listing digest

    @classmethod
    def of(cls, before: Snapshot, files: set[str], folders: set[str]) -> Inputs:
        """The digests, as the tree held them before the run, of what the run read: a file the
        run made itself was absent from the tree it started with, as from every fresh tree."""
        return cls(files={p: before.files.get(p, ABSENT) for p in sorted(files)},
                   folders={p: before.folders.get(p, ABSENT) for p in sorted(folders)})

    def first_difference(self, now: Snapshot) -> str | None:
        """The first recorded input that the tree no longer holds as recorded, or None."""
        for path, digest in self.files.items():
            if now.files.get(path, ABSENT) != digest:
                return path
        for path, digest in self.folders.items():
            if now.folders.get(path, ABSENT) != digest:
                return (path or ".") + "/ (its list of files)"
        return None


@dataclass
class Entry:
    env: str  # env_digest of the environment the chapter passed in
    inputs: Inputs


class Record:
    """tools/chapters/proven.json: one entry per passing run (a chapter: "ch07"; a test file of
    the final tree: "final tests/test_x.py"), plus the environment of the last writer
    (so that a mismatch can say which package differs)."""

    def __init__(self, root: Path):
        self.path = root / RECORD
        self.entries: dict[str, Entry] = {}  # "ch07", or "final tests/test_x.py"
        self.environment: dict[str, str] = {}
        self._changed: dict[str, Entry | None] = {}  # what save() writes over the file's state
        self._load()

    def _load(self) -> None:
        self.entries = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.environment = dict(data.get("environment", {}))
                for key, entry in data.get("runs", {}).items():
                    inputs = Inputs(dict(entry["files"]), dict(entry["folders"]))
                    self.entries[str(key)] = Entry(str(entry["env"]), inputs)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                print(f"   ({RECORD} unreadable, every chapter runs: {e})", flush=True)
                self.entries = {}

    def why_not_proven(self, key: str, now: Snapshot, env: dict[str, str]) -> str | None:
        """None when the recorded run `key` still proves it; else why it must run."""
        entry = self.entries.get(key)
        if entry is None:
            return "no passing run recorded"
        if entry.env != env_digest(env):
            changed = sorted(k for k in {*env, *self.environment}
                             if env.get(k) != self.environment.get(k))
            named = ", ".join(changed[:3]) if changed else "an earlier environment"
            return f"the environment differs ({named})"
        changed_input = entry.inputs.first_difference(now)
        return f"{changed_input} changed" if changed_input else None

    def proven(self, key: str) -> Inputs:
        return self.entries[key].inputs

    def put(self, key: str, inputs: Inputs, env: dict[str, str]) -> None:
        self.entries[key] = self._changed[key] = Entry(env_digest(env), inputs)
        self.environment = env

    def forget(self, key: str) -> None:
        self.entries.pop(key, None)
        self._changed[key] = None

    def save(self) -> None:
        """Write this run's changes over the file as it is now: two checks running at once
        (of different chapters) both keep what they proved."""
        environment = self.environment
        self._load()
        self.environment = environment or self.environment
        for key, entry in self._changed.items():
            if entry is None:
                self.entries.pop(key, None)
            else:
                self.entries[key] = entry
        data = {
            "about": "written by tools/steps.py check after a chapter passes; see "
                     "tools/steps_proof.py",
            "environment": self.environment,
            "runs": {key: {"env": e.env, "files": e.inputs.files, "folders": e.inputs.folders}
                     for key, e in sorted(self.entries.items())},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, self.path)  # readers see the old file or the new one, never half
