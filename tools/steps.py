"""Build the source tree as it stands after chapter N, show it, and check it.

The repository holds one source tree: the final engine. `tools/chapters.toml` says which files each
chapter adds (`files`, plus `early` for files a chapter needs before the chapter that explains
them), its main and its tests. Lines that change from one chapter to another carry chapter markers.
A marker is a whole line, a `#` or `//` comment whose text is one of

    >>> chNN            the lines up to `<<< chNN` exist from chapter NN on
    <<< chNN
    >>> before chNN     the lines up to `<<< before chNN` exist only before chapter NN
    <<< before chNN     (the older version that chapter NN replaces)

The lines of a `before` block are commented out in the source, so the source is exactly the final
engine and never runs the older version; a tree before chapter NN gets them back uncommented. For
example, a function that chapter NN replaces by a faster one:

    def forward(self, x):
        #  >>> before chNN
        # return self.naive(x)
        #  <<< before chNN
        #  >>> chNN
        return self.fused(x)
        #  <<< chNN

NN is a chapter number (`ch5` and `ch05` are the same). Marker lines never appear in a built tree,
and blocks do not nest.

Keep markers few and readable. The rule: a `before` block longer than about 10 lines becomes a file
of its own. The chapter that replaces the code lists the path under `rewrites` in its manifest
entry, and the older version is kept, as ordinary code, at

    tools/chapters/before-chNN/<path>     the whole file as it stands before chapter NN

Trees before chapter NN take that file in place of `<path>`; the source tree holds only the final
version. The older version may carry markers of its own for the chapters it lives through, and a
file rewritten twice has one older version per rewrite. A file is *modified* in chapter N when it
was added in an earlier chapter and N rewrites it or it carries a marker for N.

Exercises are folders `practice/exercises/<id>-<slug>/` whose meta.toml names their chapter (`chapter = 19`
for 1901); the folder may be absent.

Commands:

    python tools/steps.py list                  a header row, then one row per chapter
    python tools/steps.py tree N                the package tree after chapter N
    python tools/steps.py materialize N DEST    write the tree after chapter N into DEST
    python tools/steps.py check [N ...] [--keep] [--record-proven FILE]
                                                build each tree, run its main and tests there

`check` shows where it stands: `== ch03 ...   [3/17 · 4m10s so far, about 12m left]` before each
chapter (the estimate is the sum of the steps still to run as they took last time, kept per
repository in <cache>/steps/timings.json), each main's time and pytest's own progress as the
tests run (each test file's name, then a dot per test as it passes, unbuffered), and at the end
what the run means in plain words: what ran where, and what is left to do. Before anything runs it looks for the modules that the chapters' tests need beyond
requirements.txt (flashinfer_bench) and, if one is missing, names `python tools/setup_env.py`.

While a chapter's tests run, every Python process in its tree records the files of the tree it
reads. When the tests pass and every one of those files is the same in the final tree, the final
`pytest` run would only repeat them: they are *proven on final code*, and `--record-proven` lists
them for tools/run_tests.sh to skip.

`--root DIR` and `--manifest FILE` point the commands at another repository (the tests use this).
"""

from __future__ import annotations

import argparse
import codecs
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests, docs hooks)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
import steps_proof  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "python/minisgl/"
LAST_PLANNED_CHAPTER = 23  # DESIGN.md section 7; markers may point at chapters not yet written
# Copied into every tree whatever the chapter: test plumbing and the tools themselves.
SUPPORT = ["pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/cuda", "tools"]

NEW, MODIFIED, EARLY = "本章新建", "本章修改", "提前引入"


class StepsError(Exception):
    """A problem in the manifest or in the markers; the message names file:line where it can."""


# --------------------------------------------------------------------------------------------
# The manifest


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    stage: str
    title: str
    main: str
    tests: list[str]
    docs: str
    files: list[str]
    early: list[str] = field(default_factory=list)
    rewrites: list[str] = field(default_factory=list)  # earlier files this chapter replaces whole

    def added(self) -> list[str]:
        """Every file this chapter brings into the tree."""
        return [*self.files, *self.early, self.main, *self.tests]


@dataclass
class Manifest:
    root: Path
    chapters: list[Chapter]
    added_in: dict[str, int] = field(default_factory=dict)  # path -> chapter that adds it
    rewritten_in: dict[str, list[int]] = field(default_factory=dict)  # path -> chapters, in order
    _parsed: dict[str, list[tuple[str, Condition]]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for ch in self.chapters:
            for path in ch.added():
                self.added_in.setdefault(path, ch.number)
            for path in ch.rewrites:
                self.rewritten_in.setdefault(path, []).append(ch.number)

    def chapter(self, n: int) -> Chapter:
        for ch in self.chapters:
            if ch.number == n:
                return ch
        raise StepsError(f"chapter {n} is not in the manifest")

    def upto(self, n: int) -> list[Chapter]:
        return [ch for ch in self.chapters if ch.number <= n]

    def versions(self, path: str) -> list[Version]:
        """Where the text of `path` comes from, chapter by chapter; one version unless rewritten."""
        rewrites = self.rewritten_in.get(path, [])
        firsts = [self.added_in.get(path, 0), *rewrites]
        sources = [older_version(path, m) for m in rewrites] + [path]
        return [Version(*v) for v in zip(sources, firsts, [*rewrites, None])]

    def parsed(self, path: str) -> list[tuple[str, Condition]]:
        """The file's lines, each with the condition under which it exists (cached).

        For a rewritten file: the lines of every version, each also bound to its version's chapters.
        """
        if path not in self._parsed:
            versions = self.versions(path)
            if len(versions) == 1:
                self._parsed[path] = self.parse(path)
            else:
                self._parsed[path] = [(line, InVersion(v.first, v.until, cond))
                                      for v in versions for line, cond in self.parse(v.source)]
        return self._parsed[path]

    def parse(self, source: str) -> list[tuple[str, Cond | None]]:
        """The markers of one file as it is on disk (one version of a rewritten file)."""
        file = self.root / source
        text = read_text(file) if file.is_file() else ""  # a missing file is reported elsewhere
        return parse_markers(text, source)


def load_manifest(root: Path | str | None = None, path: Path | str | None = None) -> Manifest:
    root = Path(root).resolve() if root else REPO
    path = Path(path) if path else root / "tools" / "chapters.toml"
    with open(path, "rb") as f:
        data = tomllib.load(f)
    chapters = [
        Chapter(
            number=int(c["number"]),
            slug=c["slug"],
            stage=c["stage"],
            title=c["title"],
            main=c["main"],
            tests=list(c.get("tests", [])),
            docs=c.get("docs", f"docs/chapters/ch{int(c['number']):02d}.md"),
            files=list(c.get("files", [])),
            early=list(c.get("early", [])),
            rewrites=list(c.get("rewrites", [])),
        )
        for c in data.get("chapter", [])
    ]
    chapters.sort(key=lambda ch: ch.number)
    return Manifest(root=root, chapters=chapters)


# --------------------------------------------------------------------------------------------
# Markers


@dataclass(frozen=True)
class Cond:
    """A line inside a marker block exists from chapter `chapter` on, or only before it."""

    before: bool
    chapter: int

    def holds(self, n: int) -> bool:
        return n < self.chapter if self.before else n >= self.chapter



@dataclass(frozen=True)
class Version:
    """One version of a file: its text is in `source` from chapter `first` until (before) `until`."""

    source: str
    first: int
    until: int | None  # None: the file in the source tree, the final version


def older_version(path: str, chapter: int) -> str:
    """Where the version of `path` that chapter `chapter` replaces is kept."""
    return f"tools/chapters/before-ch{chapter:02d}/{path}"


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


def render(lines: list[tuple[str, Condition]], n: int) -> str:
    """The text at chapter n; lines of a `before` block that holds come back uncommented."""
    return "".join(_line_at(line, cond, n) for line, cond in lines)


def _line_at(line: str, cond: Condition, n: int) -> str:
    if cond is None:
        return line
    if not cond.holds(n):
        return ""
    return COMMENTED.sub(r"\1", line, count=1) if cond.before else line


def changed_in(manifest: Manifest, path: str) -> set[int]:
    """The chapters whose markers or rewrites change `path`."""
    found = set(manifest.rewritten_in.get(path, []))
    for _, cond in manifest.parsed(path):
        marker = cond.marker if isinstance(cond, InVersion) else cond
        if marker is not None:
            found.add(marker.chapter)
    return found


def read_text(path: Path) -> str:
    """The file as text; binary files (no markers possible) come back empty of lines."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return ""


def is_text(path: Path) -> bool:
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Validation


@dataclass(frozen=True)
class Problem:
    error: bool  # False: a warning
    message: str
    chapter: int | None = None  # None: affects every chapter
    missing: bool = False  # a listed file that does not exist (yet)


def validate(manifest: Manifest) -> list[Problem]:
    problems = [*_check_listing(manifest)]
    known = {ch.number for ch in manifest.chapters}
    last = max(known, default=0)
    problems += _check_rewrites(manifest)
    for path, added in manifest.added_in.items():
        if not (manifest.root / path).is_file():
            continue
        for version in manifest.versions(path):
            if not (manifest.root / version.source).is_file():
                continue  # _check_rewrites reports it
            try:
                chapters = {cond.chapter for _, cond in manifest.parse(version.source) if cond}
            except StepsError as e:
                problems.append(Problem(True, str(e), added))
                continue
            for m in sorted(chapters):
                if m not in known and not last < m <= LAST_PLANNED_CHAPTER:
                    problems.append(
                        Problem(False, f"{version.source}: marker for unknown chapter {m}")
                    )
                elif m <= version.first or (version.until is not None and m >= version.until):
                    problems.append(
                        Problem(
                            False,
                            f"{version.source}: marker for chapter {m}, but this version of "
                            f"{path} is in force {_span(version)}, so the marker changes nothing",
                        )
                    )
    problems += _unlisted_package_files(manifest)
    return problems


def _span(version: Version) -> str:
    if version.until is None:
        return f"from chapter {version.first} on"
    return f"in chapters {version.first} to {version.until - 1}"


def _check_rewrites(manifest: Manifest):
    for path, chapters in manifest.rewritten_in.items():
        added = manifest.added_in.get(path)
        for m in chapters:
            if added is None or added >= m:
                yield Problem(
                    True, f"chapter {m} rewrites {path}, which no earlier chapter adds", m
                )
            elif not (manifest.root / older_version(path, m)).is_file():
                yield Problem(
                    True,
                    f"chapter {m} rewrites {path}, but its older version "
                    f"{older_version(path, m)} does not exist",
                    m,
                )


def _check_listing(manifest: Manifest):
    seen: dict[str, int] = {}
    for ch in manifest.chapters:
        for path in ch.added():
            if path in seen:
                yield Problem(
                    True, f"{path} is listed twice (chapters {seen[path]} and {ch.number})"
                )
            seen[path] = ch.number
            if not (manifest.root / path).is_file():
                yield Problem(True, f"chapter {ch.number}: {path} does not exist", ch.number, True)


def _unlisted_package_files(manifest: Manifest):
    package = manifest.root / PACKAGE
    if not package.is_dir():
        return
    for file in sorted(package.rglob("*")):
        rel = file.relative_to(manifest.root).as_posix()
        if file.is_file() and "__pycache__" not in rel and rel not in manifest.added_in:
            yield Problem(False, f"{rel} is in no chapter of the manifest")


def fail_on_errors(manifest: Manifest, n: int, allow_missing: bool = False) -> list[Problem]:
    """Raise if the tree of chapter n cannot be built; return the problems that remain."""
    problems = [p for p in validate(manifest) if p.chapter is None or p.chapter <= n]
    errors = [p.message for p in problems if p.error and not (allow_missing and p.missing)]
    if errors:
        raise StepsError("\n".join(errors))
    return problems


# --------------------------------------------------------------------------------------------
# Files at a chapter


def file_at_chapter(path: str, n: int, manifest: Manifest | None = None) -> str:
    """The text of `path` (relative to the repo root) in the tree after chapter n."""
    manifest = manifest or load_manifest()
    added = manifest.added_in.get(path)
    if added is None and path.startswith(PACKAGE):
        raise StepsError(f"{path} is in no chapter of the manifest")
    if added is not None and added > n:
        raise StepsError(f"{path} is added in chapter {added}, so it does not exist at chapter {n}")
    if not (manifest.root / path).is_file():
        raise StepsError(f"{path} does not exist")
    return render(manifest.parsed(path), n)


def files_at(manifest: Manifest, n: int) -> list[str]:
    """Every file the manifest puts into the tree after chapter n, support files aside."""
    return [path for ch in manifest.upto(n) for path in ch.added()]


def status(manifest: Manifest, path: str, n: int) -> str | None:
    """How chapter n touches `path`: NEW, MODIFIED, EARLY or None."""
    added = manifest.added_in[path]
    if added == n:
        return EARLY if path in manifest.chapter(n).early else NEW
    return MODIFIED if n in changed_in(manifest, path) else None


def materialize(n: int, dest: Path | str, manifest: Manifest | None = None) -> Path:
    """Write the tree after chapter n into dest (which must be empty or absent)."""
    manifest = manifest or load_manifest()
    manifest.chapter(n)
    fail_on_errors(manifest, n)
    dest = Path(dest)
    if dest.exists() and any(dest.iterdir()):
        raise StepsError(f"{dest} is not empty")
    for path in files_at(manifest, n):
        _write(manifest, path, n, dest)
    for item in SUPPORT:
        source = manifest.root / item
        if source.is_file():
            _write(manifest, item, n, dest)
        elif source.is_dir():
            for file in sorted(source.rglob("*")):
                rel = file.relative_to(manifest.root).as_posix()
                if file.is_file() and "__pycache__" not in rel and not _is_record(rel):
                    _write(manifest, rel, n, dest, markers=item != "tools")
    return dest


def _is_record(rel: str) -> bool:
    """The record of passing runs (and its half-written copies): what checks write, no input."""
    folder, name = steps_proof.RECORD.rsplit("/", 1)
    return rel == steps_proof.RECORD or rel.startswith(f"{folder}/.{name}")


def _write(manifest: Manifest, path: str, n: int, dest: Path, markers: bool = True) -> None:
    source, target = manifest.root / path, dest / path
    target.parent.mkdir(parents=True, exist_ok=True)
    if markers and is_text(source):
        target.write_text(render(manifest.parsed(path), n), encoding="utf-8")
        shutil.copymode(source, target)
    else:
        shutil.copy2(source, target)


# --------------------------------------------------------------------------------------------
# The tree shown at the top of every chapter page


def header_line(manifest: Manifest, n: int) -> str:
    package = [p for p in files_at(manifest, n) if p.startswith(PACKAGE)]
    touched = [status(manifest, p, n) for p in package]
    return (
        f"到这一章为止的文件：{len(package)} 个（新建 {touched.count(NEW)}，"
        f"修改 {touched.count(MODIFIED)}，提前引入 {touched.count(EARLY)}）"
    )


def tree_text(n: int, manifest: Manifest | None = None) -> str:
    """The header line and the package tree after chapter n, as in the chapter pages."""
    manifest = manifest or load_manifest()
    manifest.chapter(n)
    fail_on_errors(manifest, n, allow_missing=True)  # a planned file still shows in the tree
    root: dict = {}
    for path in files_at(manifest, n):
        if path.startswith(PACKAGE):
            *folders, name = path[len(PACKAGE) :].split("/")
            node = root
            for folder in folders:
                node = node.setdefault(folder + "/", {})
            node[name] = status(manifest, path, n)
    lines = ["minisgl/", *_tree_lines(root, "")]
    return header_line(manifest, n) + "\n\n" + "\n".join(lines) + "\n"


def _tree_lines(node: dict, indent: str) -> list[str]:
    files = sorted((k for k in node if not k.endswith("/")), key=_file_order)
    folders = sorted(k for k in node if k.endswith("/"))
    names = [*files, *folders]
    lines = []
    for i, name in enumerate(names):
        last = i == len(names) - 1
        branch, deeper = ("└── ", "    ") if last else ("├── ", "│   ")
        child = node[name]
        if not name.endswith("/"):
            lines.append(indent + branch + name + (f"  ← {child}" if child else ""))
        elif _touched(child):
            lines.append(indent + branch + name)
            lines += _tree_lines(child, indent + deeper)
        else:
            lines.append(f"{indent}{branch}{name}  （{_count(child)} 个文件，不变）")
    return lines


def _file_order(name: str) -> tuple[bool, str]:
    return name != "__init__.py", name.lstrip("_").lower()


def _touched(node: dict) -> bool:
    return any(_touched(v) if k.endswith("/") else v for k, v in node.items())


def _count(node: dict) -> int:
    return sum(_count(v) if k.endswith("/") else 1 for k, v in node.items())


# --------------------------------------------------------------------------------------------
# list


def exercises(root: Path, n: int) -> list[str]:
    """Exercise folders whose meta.toml says `chapter = n` (ids are not tied to chapters)."""
    found = []
    for meta in sorted((root / "practice" / "exercises").glob("*/meta.toml")):
        with meta.open("rb") as f:
            if tomllib.load(f).get("chapter") == n:
                found.append(meta.parent.name)
    return found


LIST_COLUMNS = ["chapter", "new", "mod", "early", "total", "main", "tests", "docs", "exercises",
                "title"]


def list_lines(manifest: Manifest) -> list[str]:
    """A header row, then one row per chapter: files it adds (new, early) and modifies, the
    package's size after it, and whether its main, tests, docs page and exercises exist."""
    rows = [LIST_COLUMNS]
    for ch in manifest.chapters:
        package = [p for p in files_at(manifest, ch.number) if p.startswith(PACKAGE)]
        try:
            touched = [status(manifest, p, ch.number) for p in package]
        except StepsError:
            touched = []  # broken markers: validate() reports them below the table
        tests = sum((manifest.root / t).is_file() for t in ch.tests)
        rows.append([
            f"ch{ch.number:02d}", str(touched.count(NEW)), str(touched.count(MODIFIED)),
            str(touched.count(EARLY)), str(len(package)), _yes((manifest.root / ch.main).is_file()),
            f"{tests}/{len(ch.tests)}", _yes((manifest.root / ch.docs).is_file()),
            str(len(exercises(manifest.root, ch.number))), ch.title,
        ])
    widths = [max(len(row[i]) for row in rows) for i in range(len(LIST_COLUMNS) - 1)]
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]])
            for row in rows]


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# --------------------------------------------------------------------------------------------
# check


# Runs first in every child: hide the real repository and any editable install of it, and refuse
# to import minisgl from anywhere but the chapter tree. While a chapter's tests run
# (MINISGL_STEPS_RECORD set), it also records which files of the tree they use: see _note.
SITECUSTOMIZE = """\
import atexit
import os
import sys

_TREE = os.path.realpath(os.environ["MINISGL_STEPS_TREE"])
_TREES = {_TREE, os.path.abspath(os.environ["MINISGL_STEPS_TREE"])}
_RECORD = os.environ.get("MINISGL_STEPS_RECORD")
_noted = set()
_HIDE = [os.path.realpath(p) for p in os.environ["MINISGL_STEPS_HIDE"].split(os.pathsep) if p]


def _inside(path, folder):
    path = os.path.realpath(path or os.getcwd())
    return path == folder or path.startswith(folder + os.sep)


def _foreign(path):
    return not _inside(path, _TREE) and any(_inside(path, h) for h in _HIDE)


def _editable(obj):
    return "__editable__" in getattr(obj, "__module__", "") + repr(obj)


sys.meta_path[:] = [f for f in sys.meta_path if not _editable(f)]
sys.path_hooks[:] = [h for h in sys.path_hooks if not _editable(h)]
sys.path[:] = [p for p in sys.path if not _foreign(p)]
sys.path_importer_cache.clear()


class _OnlyFromTree:
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name != "minisgl" and not name.startswith("minisgl."):
            return None
        for finder in sys.meta_path:
            if finder is cls or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            _note_missing(name, path)
            return None
        places = [spec.origin] if spec.origin else list(spec.submodule_search_locations or [])
        for place in places:
            if place in ("built-in", "frozen") or not _inside(place, _TREE):
                raise ImportError(
                    f"steps.py isolation: {name} would come from {place}, outside {_TREE}"
                )
        return spec


sys.meta_path.insert(0, _OnlyFromTree)


# One line per file of the tree, relative to it, written at once with O_APPEND: lines from
# concurrent processes never mix, and a worker that ends by os._exit or a signal has still
# recorded what it read.
def _note(path, folder=False):
    if not _RECORD:
        return
    path = os.path.abspath(path)
    if os.sep + "__pycache__" in path or os.sep + ".hypothesis" in path:
        return  # caches that tests write (bytecode, hypothesis' examples), not code
    for tree in _TREES:
        if path == tree or path.startswith(tree + os.sep):
            relative = path[len(tree) + 1 :]
            if folder:
                relative = "/" + relative  # a folder listed: its own record, see used_folders
            if relative not in _noted:
                _noted.add(relative)
                fd = os.open(_RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    os.write(fd, os.fsencode(relative) + b"\\n")
                finally:
                    os.close(fd)
            return


def _note_missing(name, path):
    # A minisgl module this tree lacks: where the final tree may have it, so that a test that
    # behaves differently once it exists (importorskip, find_spec) is not taken as proven.
    tail = name.rpartition(".")[2]
    for folder in path or sys.path:
        _note(os.path.join(folder, tail + ".py"))
        _note(os.path.join(folder, tail, "__init__.py"))


def _note_started(argv, cwd):
    # A program started with a file of the tree as an argument may read it, and its neighbours,
    # where no hook of ours runs (`python -I` ignores sitecustomize; a compiler, a shell): every
    # file of that folder counts as read.
    for arg in argv if isinstance(argv, (list, tuple)) else [argv]:
        if not isinstance(arg, (str, bytes, os.PathLike)):
            continue
        path = os.path.join(os.fsdecode(cwd) if cwd else os.getcwd(), os.fsdecode(arg))
        if os.path.isfile(path) and any(_inside(path, t) for t in _TREES):
            folder = os.path.dirname(os.path.abspath(path))
            _note(folder, folder=True)
            for name in os.listdir(folder):
                if os.path.isfile(os.path.join(folder, name)):
                    _note(os.path.join(folder, name))


def _note_reads(event, args):
    # Every file opened for reading: imported sources (io.open_code) and data files alike; and
    # every folder listed (the import system lists each package folder, glob and os.walk scan):
    # a file added to a listed folder can change what the run does.
    if event in ("os.listdir", "os.scandir") and not isinstance(args[0], int):
        _note(os.fsdecode(args[0] if args[0] is not None else "."), folder=True)
        return
    if event == "subprocess.Popen":
        _note_started(args[1], args[2])
        return
    if event in ("os.exec", "os.posix_spawn"):
        _note_started(args[1], None)
        return
    if event != "open" or args[0] is None or isinstance(args[0], int):
        return
    if args[2] & os.O_ACCMODE != os.O_RDONLY:
        return  # written, not read: a file the test makes is no input
    _note(os.fsdecode(args[0]))  # a record that cannot be written fails the test's open()


def _note_modules():
    # Extension modules load without an `open` event; every module's file is in sys.modules.
    for module in list(sys.modules.values()):
        # through __dict__: a lazy module's __getattr__ would import or raise
        file = (getattr(module, "__dict__", None) or {}).get("__file__")
        if isinstance(file, str):
            _note(file)


if _RECORD:
    sys.addaudithook(_note_reads)
    atexit.register(_note_modules)
"""


def child_env(tree: Path, site_dir: Path, root: Path) -> dict[str, str]:
    hide = [str(root)]
    spec = importlib.util.find_spec("minisgl") if "minisgl" not in sys.modules else None
    origin = spec.origin if spec else getattr(sys.modules.get("minisgl"), "__file__", None)
    if origin:
        installed = Path(origin).resolve().parent.parent
        if installed.name not in ("site-packages", "dist-packages"):
            hide.append(str(installed))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree / "python"), str(site_dir)])
    env["MINISGL_STEPS_TREE"] = str(tree)
    env["MINISGL_STEPS_HIDE"] = os.pathsep.join(hide)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


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
             echo: bool = False) -> StepResult:
    """Run one main or test command; with `echo`, show its output as it comes (pytest's dots are
    the per-test progress), each line indented under the chapter. Either way, a line says the
    step still runs whenever nothing was shown for heartbeat_seconds()."""
    start = time.monotonic()
    proc = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    chunks: list[bytes] = []
    # Without echo the step's label line is still open ("main  examples/ch01.py ... ").
    shown = _Echo(show=echo, at_line_start=echo)

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
                shown.note(f"... still running ({_duration(time.monotonic() - start)} so far)")
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

    def __init__(self, show: bool = True, at_line_start: bool = True) -> None:
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.show = show
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
            sys.stdout.write("".join(out))
            sys.stdout.flush()
            if out:
                self.last_shown = time.monotonic()

    def quiet_for(self) -> float:
        return time.monotonic() - self.last_shown

    def note(self, text: str) -> None:
        """A line of our own: on a line of its own, even in the middle of a line of dots."""
        with self.lock:
            if not self.at_line_start:
                sys.stdout.write("\n")
                self.broke_line = True
            sys.stdout.write(f"   | {text}\n")
            sys.stdout.flush()
            self.at_line_start = True
            self.last_shown = time.monotonic()

    def end(self) -> None:
        if self.show and not self.at_line_start:
            sys.stdout.write("\n")
            sys.stdout.flush()


# --------------------------------------------------------------------------------------------
# Timings of the previous run, for the estimate of what is left


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


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


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
        text = f"{_duration(time.monotonic() - self.started)} so far"
        if not left:
            return text
        if known:
            text += f", about {_duration(sum(known))} left"
        unknown = len(left) - len(known)
        if unknown:
            text += f" ({unknown} step{'s' * (unknown > 1)} never timed here before)"
        elif known:
            text += " (from the last run's timings)"
        return text


@dataclass
class ChapterCheck:
    """What `check` learned about one chapter."""

    tests: list[str]
    ok: bool
    changed: list[str] = field(default_factory=list)  # files its tests used that change later
    by_record: bool = False  # not run: the record of an earlier passing run proves it

    @property
    def proven(self) -> bool:
        """Its tests passed on code that the final tree holds unchanged, so running them again
        on the final tree would only repeat this run."""
        return self.ok and bool(self.tests) and not self.changed


@dataclass
class Proof:
    """The record of passing runs (tools/steps_proof.py) and the environment of this one."""

    record: steps_proof.Record
    env: dict[str, str]
    rerun: bool = False  # run everything; passing runs are still recorded

    @classmethod
    def load(cls, root: Path, rerun: bool = False) -> Proof:
        return cls(steps_proof.Record(root), steps_proof.environment(), rerun)

    def why_not_proven(self, key: str, now: steps_proof.Snapshot) -> str | None:
        if self.rerun:
            return "--rerun asks for every run"
        return self.record.why_not_proven(key, now, self.env)


def check_chapter(manifest: Manifest, n: int, workdir: Path, timeout: float,
                  progress: Progress | None = None, position: str = "",
                  proof: Proof | None = None) -> ChapterCheck:
    """Build chapter n's tree and run its main and tests there; with `proof`, first look whether
    the record of an earlier passing run still proves the chapter, and record a passing run."""
    ch = manifest.chapter(n)
    progress = progress or Progress(manifest.root, steps=[], previous={})
    print(f"== ch{n:02d} {ch.title}   [{position}{progress.line()}]", flush=True)
    tree = workdir / f"ch{n:02d}"
    try:
        materialize(n, tree, manifest)
    except StepsError as e:
        print(f"   tree   FAIL\n{_indent(str(e))}", flush=True)
        return ChapterCheck(ch.tests, ok=False)
    fresh = steps_proof.Snapshot.of(tree)  # before anything runs: tests may write into it
    if proof is not None:
        why = proof.why_not_proven(f"ch{n:02d}", fresh)
        if why is None:
            inputs = proof.record.proven(f"ch{n:02d}")
            print(f"   record the {len(inputs.files)} files and {len(inputs.folders)} folders its "
                  "passing run read are unchanged: proven by record, not run", flush=True)
            for step in progress.steps:
                if step.startswith(f"ch{n:02d} "):
                    progress.done.add(step)
            found = ChapterCheck(ch.tests, ok=True, by_record=True)
            return _compare_with_final(manifest, tree, found, sorted(inputs.files))
        print(f"   record {why}: runs", flush=True)
    site_dir = workdir / "site"
    site_dir.mkdir(exist_ok=True)
    (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    record = workdir / "used" / f"ch{n:02d}.txt"  # what the tests read, see SITECUSTOMIZE
    main_record = workdir / "used" / f"ch{n:02d}-main.txt"  # what the main read
    record.parent.mkdir(exist_ok=True)
    env = child_env(tree, site_dir, manifest.root)
    main_env = {**env, "MINISGL_STEPS_RECORD": str(main_record)}
    steps = [("main ", [sys.executable, ch.main], ch.main, main_env)]
    if ch.tests:
        # -u: pytest's progress reaches the pipe as it is written, not when a line or a buffer
        # fills (a line of dots could take a minute); default verbosity names each test file.
        pytest = [sys.executable, "-u", "-m", "pytest", "--no-header", "-p", "no:cacheprovider",
                  *ch.tests]
        recording = {**env, "MINISGL_STEPS_RECORD": str(record)}
        steps.append(("tests", pytest, "pytest " + " ".join(ch.tests), recording))
    ok = True
    for label, command, shown, step_env in steps:
        step = f"ch{n:02d} {label.strip()}"
        before = progress.previous.get(step)
        echo = label == "tests"  # pytest's own progress, as it runs
        hint = f" (took {before:.1f}s last time)" if before is not None else ""
        print(f"   {label}  {shown}{hint} ...", end="\n" if echo else " ", flush=True)
        result = run_step(command, tree, step_env, timeout, echo=echo)
        progress.finish(step, result.seconds)
        last = result.output.strip().splitlines()[-1:] or [""]
        verdict = "ok" if result.ok else "FAIL"
        prefix = f"   {label}  " if echo or result.broke_line else ""
        summary = last[0].strip("= ")  # pytest's last line without its ==== banner
        print(f"{prefix}{verdict} ({result.seconds:.1f}s)  {summary[:80]}", flush=True)
        if not result.ok:
            ok = False
            if not echo:  # echoed output is on the screen already
                print(_indent("\n".join(result.output.rstrip().splitlines()[-40:])), flush=True)
    found = ChapterCheck(ch.tests, ok)
    if proof is not None:
        if ok:
            files = {*used_files(ch, tree, record, manifest.root), ch.main,
                     *(line for line in _record_lines(main_record) if not line.startswith("/"))}
            folders = used_folders(record) | used_folders(main_record)
            proof.record.put(f"ch{n:02d}", steps_proof.Inputs.of(fresh, files, folders),
                             proof.env)
        else:
            proof.record.forget(f"ch{n:02d}")
        proof.record.save()
    if ok and ch.tests:
        found = _compare_with_final(manifest, tree, found,
                                    used_files(ch, tree, record, manifest.root))
    return found


def _compare_with_final(manifest: Manifest, tree: Path, found: ChapterCheck,
                        used: list[str]) -> ChapterCheck:
    """Mark the chapter's tests proven on final code when every file they read is final."""
    if not found.tests:
        return found
    found.changed = [path for path in used if not same_as_final(manifest, tree, path)]
    if found.changed:
        more = f" (and {len(found.changed) - 1} more)" if len(found.changed) > 1 else ""
        print(f"   final  {found.changed[0]}{more} changes later: pytest runs these tests "
              "again on the final tree", flush=True)
    else:
        read = sum((tree / path).is_file() for path in used)
        print(f"   final  the {read} files these tests read are all final: proven", flush=True)
    return found


# What pytest reads before any test (configuration, conftest files): it shapes every run, so it
# counts as used although no test opens it. Files absent from both trees compare equal.
PYTEST_INPUTS = ["pyproject.toml", "pytest.ini", "conftest.py", "tests/__init__.py",
                 "tests/conftest.py"]
# A compiler that a test starts reads the headers a C/CUDA file includes, and no Python process
# sees those reads: a test that uses one such file counts as using every one in the tree.
NATIVE = (".c", ".cc", ".cpp", ".cu", ".cuh", ".h", ".hpp")
FINAL = sys.maxsize  # a chapter after every other one: render(lines, FINAL) is the final engine


def used_files(ch: Chapter, tree: Path, record: Path, root: Path) -> list[str]:
    """The files of the tree that the chapter's test run read or looked for, relative to it.

    Folders do not count: opening one reads no content, and a name that os.open resolves
    against a folder descriptor (shutil.rmtree opens every folder it removes so) reaches the
    record as if it were relative to the tree, since the audit event does not carry the
    descriptor."""
    used = {line for line in _record_lines(record) if not line.startswith("/")}
    used |= {*ch.tests, *PYTEST_INPUTS}
    if any(path.endswith(NATIVE) for path in used):
        used |= {file.relative_to(tree).as_posix() for file in tree.rglob("*")
                 if file.is_file() and file.name.endswith(NATIVE)}
    return sorted(path for path in used if not (tree / path).is_dir()
                  and not (root / path).is_dir())


def used_folders(record: Path) -> set[str]:
    """The folders of the tree whose entries the run listed, relative to it ("" for the tree)."""
    return {line[1:] for line in _record_lines(record) if line.startswith("/")}


def _record_lines(record: Path) -> list[str]:
    return record.read_text(encoding="utf-8").splitlines() if record.is_file() else []


def same_as_final(manifest: Manifest, tree: Path, path: str) -> bool:
    """Whether the file `path` is in the chapter tree as in the final tree (the repository),
    or absent from both.

    Marker lines and commented-out `before` blocks aside: a file whose markers all belong to
    this chapter or earlier ones holds the same code in both trees."""
    here, final = tree / path, manifest.root / path
    if not (here.is_file() and final.is_file()):
        return here.exists() == final.exists()
    return here.read_bytes() == final_bytes(manifest, path)


def final_bytes(manifest: Manifest, path: str) -> bytes:
    """The file as a tree after every chapter, planned ones included, would hold it."""
    source = manifest.root / path
    marked = path in manifest.added_in or any(
        path == item or path.startswith(item + "/") for item in SUPPORT if item != "tools"
    )  # as materialize writes them: tools/ is copied as it is
    if marked and is_text(source):
        return render(manifest.parsed(path), FINAL).encode("utf-8")
    return source.read_bytes()


def _indent(text: str) -> str:
    return "\n".join("   | " + line for line in text.splitlines())


# Modules that a chapter's main or tests import and that `pip install -r requirements.txt` alone
# does not bring, with the first chapter that needs them: checked before anything runs, so that a
# missing one costs a line, not minutes of checking.
NEEDS = {"pytest": 1, "flashinfer_bench": 19}
SETUP = "python tools/setup_env.py"


def missing_modules(numbers: list[int]) -> list[str]:
    last = max(numbers)
    return [name for name, first in NEEDS.items()
            if first <= last and importlib.util.find_spec(name) is None]


def check(
    manifest: Manifest, numbers: list[int], keep: bool, timeout: float,
    record_proven: Path | None = None, rerun: bool = False,
) -> bool:
    """Check the chapters; one whose record still proves it is skipped unless `rerun`."""
    checks: dict[int, ChapterCheck] = {}
    proof = Proof.load(manifest.root, rerun)
    numbers = numbers or [ch.number for ch in manifest.chapters]
    progress = Progress(
        manifest.root,
        steps=[f"ch{n:02d} {step}" for n in numbers
               for step in ("main", "tests")[: 1 + bool(manifest.chapter(n).tests)]],
        previous=load_timings(manifest.root),
    )
    workdir = Path(tempfile.mkdtemp(prefix="minisgl-steps-"))
    try:
        for i, n in enumerate(numbers, start=1):
            checks[n] = check_chapter(manifest, n, workdir, timeout, progress,
                                      f"{i}/{len(numbers)} · ", proof)
    finally:
        if keep:
            print(f"trees kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    failed = [n for n, found in checks.items() if not found.ok]
    summary = ", ".join(f"ch{n:02d}" for n in failed) or "none"
    by_record = [f"ch{n:02d}" for n, found in checks.items() if found.by_record]
    print(f"{len(checks) - len(failed)}/{len(checks)} chapters passed; failed: {summary} "
          f"({progress.line()})")
    print(f"proven by the record of an earlier passing run, not run: {len(by_record)}"
          + (f" ({', '.join(by_record)})" if by_record else "")
          + f"; the record is {steps_proof.RECORD}")
    proven = [test for found in checks.values() if found.proven for test in found.tests]
    rerun = [(test, found.changed[0]) for found in checks.values() if found.changed
             for test in found.tests]
    print(f"test files proven on final code: {len(proven)}; re-run by pytest because their code "
          f"changed later: {len(rerun)}")
    for test, changed in rerun:
        print(f"   re-run {test}: {changed} changed")
    print(closing_words(len(checks), failed, len(proven), len(rerun)), flush=True)
    if record_proven is not None:
        record_proven.write_text("".join(test + "\n" for test in proven), encoding="utf-8")
    return not failed


def closing_words(checked: int, failed: list[int], proven: int, rerun: int) -> str:
    """The check's outcome in plain words: where the tests ran, what still runs on the final
    tree (and by which command), and what is left for the learner to do."""
    if failed:
        ran = f"{checked - len(failed)} of {checked} chapters passed, each on its own tree"
    elif checked == 1:
        ran = "the chapter passed on its own tree"
    else:
        ran = f"all {checked} chapters passed, each on its own tree"
    words = [f"In short: {ran} (the code as it stands after that chapter). This check ran "
             "nothing on the final tree."]
    if proven:
        words.append(f"{proven} test file{'s' * (proven != 1)} read only code that the final "
                     f"tree holds unchanged, so {'its' if proven == 1 else 'their'} pass holds "
                     "for the final code too.")
    if rerun:
        words.append(f"{rerun} test file{'s' * (rerun != 1)} read code that later chapters "
                     "change: `python -m pytest` runs them on the final tree (`bash "
                     "tools/run_tests.sh` does so right after this check).")
    if failed:
        numbers = " ".join(str(n) for n in failed)
        words.append(f"Left for you: fix {', '.join(f'ch{n:02d}' for n in failed)} (the "
                     f"failing output is above), then run `python tools/steps.py check "
                     f"{numbers}` again.")
    else:
        words.append("Nothing is left for you to do here.")
    return "\n".join(textwrap.wrap(" ".join(words), 100))


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, help="repository root (default: this repository)")
    parser.add_argument(
        "--manifest", type=Path, help="manifest (default: ROOT/tools/chapters.toml)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="a header row, then one row per chapter",
                   description="A header row, then one row per chapter: files it adds and "
                   "modifies, whether its main, tests, docs page and exercises exist.")
    tree = sub.add_parser("tree", help="the package tree after chapter N")
    tree.add_argument("n", type=int, help="chapter")
    mat = sub.add_parser("materialize", help="write the tree after chapter N into DEST")
    mat.add_argument("n", type=int, help="chapter")
    mat.add_argument("dest", type=Path, help="an empty or absent folder")
    chk = sub.add_parser(
        "check", help="build each chapter's tree and run its main and tests",
        description="Build each chapter's tree and run its main and tests there, with progress "
        "per chapter and per test and an estimate of the time left from the previous run "
        f"(timings kept in {timings_path()}).")
    chk.add_argument("n", type=int, nargs="*", help="chapters (default: all)")
    chk.add_argument("--keep", action="store_true",
                     help="keep the trees and print where (default: remove them)")
    chk.add_argument("--timeout", type=float, default=600,
                     help="seconds per main or test run (default: %(default)g)")
    chk.add_argument(
        "--record-proven", type=Path, metavar="FILE",
        help="write the test files proven on final code to FILE, one per line (default: none)",
    )
    chk.add_argument(
        "--rerun", action="store_true",
        help=f"run every chapter, even one that the record of an earlier passing run "
        f"({steps_proof.RECORD}) proves unchanged (default: skip those)",
    )
    args = parser.parse_args(argv)

    try:
        manifest = load_manifest(args.root, args.manifest)
        if args.command == "list":
            print("\n".join(list_lines(manifest)))
            for p in validate(manifest):
                print(
                    ("missing: " if p.missing else "error: " if p.error else "warning: ")
                    + p.message
                )
        elif args.command == "tree":
            print(tree_text(args.n, manifest), end="")
            for p in fail_on_errors(manifest, args.n, allow_missing=True):
                if p.missing:
                    print(f"warning: {p.message}", file=sys.stderr)
        elif args.command == "materialize":
            print(materialize(args.n, args.dest, manifest))
        else:
            missing = missing_modules(args.n or [ch.number for ch in manifest.chapters])
            if missing:
                print(f"error: the chapters' tests need {', '.join(missing)}, which this Python "
                      f"lacks: run `{SETUP}` (the README's set-up)", file=sys.stderr)
                return 2
            passed = check(manifest, args.n, args.keep, args.timeout, args.record_proven,
                           args.rerun)
            return 0 if passed else 1
    except StepsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
