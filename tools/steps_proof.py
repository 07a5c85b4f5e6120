"""Proof by record: a chapter whose inputs have not changed since it passed need not run again.

`steps.py check` records, for each chapter whose main and tests pass, what that run read: every
file of the chapter's tree that a Python process opened or looked for (with its SHA-256, or
"absent"), every folder of the tree whose entries it listed (a digest of the sorted names), and
the environment it ran in (Python, machine, compiler) and the version of every installed
distribution whose code it loaded.
The record lives in the repository (`tools/chapters/proven.json`), so a clean clone carries it.

A later check of the same chapter first builds the tree, then compares: when the environment is
the same, every package the run loaded is installed at the version it had, and every recorded
file and folder is the same in the new tree, the run would read
exactly what the passing run read, so it would do exactly what it did. The chapter is then
*proven by record* and skipped; anything missing or different makes it run (and, when it passes,
rewrites its entry). Nothing but a passing run writes an entry.

What the record cannot see, and why that is safe enough:
- reads by non-Python programs (a compiler reading headers): steps.py counts every C/CUDA file of
  the tree as read as soon as one is (see NATIVE there);
- inputs outside the tree (installed packages, the compiler): the environment is part of the
  record; the model caches under ~/.cache are built by the tree's own code from pinned wheels;
- packages: a package counts once one of its files was opened or imported (the hook notes its
  top-level name; packages_loaded() maps that to the distribution). Packages installed beside
  them but never loaded are left out on purpose: a fresh virtual environment lacks the
  unrelated tools of a machine set up by hand, and should not run everything again for that.
  What is lost: a library that only *probes* whether an optional package is installed, without
  loading it, and behaves differently for it. requirements.lock keeps every machine that
  tools/setup_env.py set up on the same versions.
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
# A line of the hook's file (steps_sitecustomize.py): "path/in/tree" a file read, "/folder" a
# folder listed, "+name" the top-level name of an installed package that was loaded.
FOLDER_MARK, PACKAGE_MARK = "/", "+"


@dataclass
class Reads:
    """What one process tree noted through the hook, parsed."""

    files: set[str] = field(default_factory=set)
    folders: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)  # top-level import names

    @classmethod
    def of(cls, *notes: Path) -> Reads:
        reads = cls()
        for note in notes:
            lines = note.read_text(encoding="utf-8").splitlines() if note.is_file() else []
            for line in lines:
                if line.startswith(FOLDER_MARK):
                    reads.folders.add(line[1:])
                elif line.startswith(PACKAGE_MARK):
                    reads.packages.add(line[1:])
                elif line:
                    reads.files.add(line)
        return reads


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
    """What outside the tree decides how any of its code runs; the packages are per run (see
    packages_loaded)."""
    env = {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "machine": platform.machine(),
        "system": platform.system(),
        "kernel": platform.release(),  # the judge's sandbox uses its cgroups, Landlock, seccomp
        "g++": _version_of("g++"),  # the CPU emulator's compiler (chapter 19)
        "chromium": _version_of("chromium"),  # the judge page's browser test
    }
    return dict(sorted(env.items()))


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def installed() -> dict[str, str]:
    """Every installed distribution's version, by normalised name. minisgl itself is left out:
    the tree is its code, and an editable install of the repository is hidden from the tree."""
    versions = {}
    for dist in metadata.distributions():
        name = _normal(dist.metadata["Name"] or "")
        if name and name != "minisgl":
            versions.setdefault(name, dist.version)  # the first on sys.path wins, as in import
    return versions


def packages_loaded(tops: set[str]) -> dict[str, str]:
    """The distributions behind top-level import names, with their installed versions. A name
    no distribution claims (a loose module) is kept as "module NAME" without a version."""
    owners = metadata.packages_distributions()
    versions = installed()
    found = {}
    for top in sorted(tops):
        dists = [_normal(d) for d in owners.get(top, [])]
        for dist in dists:
            if dist != "minisgl":
                found[dist] = versions.get(dist, ABSENT)
        if not dists:
            found[f"module {top}"] = "loaded"
    return found


def package_difference(recorded: dict[str, str], now: dict[str, str]) -> str | None:
    """The first package whose version differs from the recorded run's, in words, or None."""
    for name, version in recorded.items():
        if name.startswith("module "):
            continue
        if now.get(name, ABSENT) != version:
            return f"package {name} is {now.get(name, 'not installed')} here, was {version}"
    return None


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
    packages: dict[str, str] = field(default_factory=dict)  # distribution loaded -> version

    @classmethod
    def of(cls, before: Snapshot, files: set[str], folders: set[str],
           packages: set[str] = frozenset()) -> Inputs:
        """The digests, as the tree held them before the run, of what the run read: a file the
        run made itself was absent from the tree it started with, as from every fresh tree;
        and the versions of the packages it loaded (`packages`: top-level import names)."""
        return cls(files={p: before.files.get(p, ABSENT) for p in sorted(files)},
                   folders={p: before.folders.get(p, ABSENT) for p in sorted(folders)},
                   packages=packages_loaded(set(packages)))

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
        self._installed: dict[str, str] | None = None  # this machine's packages, read once
        self._load()

    def _load(self) -> None:
        self.entries = {}
        if self.path.is_file():
            try:
                data = json.loads(self.path.read_text(encoding="utf-8"))
                self.environment = dict(data.get("environment", {}))
                for key, entry in data.get("runs", {}).items():
                    if "packages" not in entry:
                        continue  # written before package versions were kept: runs again
                    inputs = Inputs(dict(entry["files"]), dict(entry["folders"]),
                                    dict(entry["packages"]))
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
        changed_package = package_difference(entry.inputs.packages, self.installed())
        if changed_package:
            return changed_package
        changed_input = entry.inputs.first_difference(now)
        return f"{changed_input} changed" if changed_input else None

    def installed(self) -> dict[str, str]:
        if self._installed is None:
            self._installed = installed()
        return self._installed

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
            "runs": {key: {"env": e.env, "files": e.inputs.files, "folders": e.inputs.folders,
                           "packages": e.inputs.packages}
                     for key, e in sorted(self.entries.items())},
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}")
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, self.path)  # readers see the old file or the new one, never half
