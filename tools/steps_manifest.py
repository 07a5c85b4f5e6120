"""The chapter manifest (tools/chapters.toml) and the text of a file at a chapter.

A file's text at chapter N: the version of it in force at N (the source tree's file, or an older
version under tools/chapters/before-chMM/), its markers applied (tools/steps_markers.py), then
what the tree derives by itself (tools/steps_derive.py).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from steps_derive import TreeModules, derive, top_level_names
from steps_markers import Cond, Condition, InVersion, StepsError, apply_markers, parse_markers

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "python/minisgl/"
# The stage plan (the chapter table of README.md and docs/index.md) has 23 chapters; a marker may
# name a planned chapter that the manifest does not list yet.
LAST_PLANNED_CHAPTER = 27
# Copied into every tree whatever the chapter: test plumbing and the tools themselves.
SUPPORT = ["pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/cuda", "tools"]


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


@dataclass(frozen=True)
class Version:
    """One version of a file: its text is in `source` from chapter `first` until (before) `until`."""

    source: str
    first: int
    until: int | None  # None: the file in the source tree, the final version


def older_version(path: str, chapter: int) -> str:
    """Where the version of `path` that chapter `chapter` replaces is kept."""
    return f"tools/chapters/before-ch{chapter:02d}/{path}"


class FileLines(list):
    """A file's lines with their conditions (what Manifest.parsed returns), which also know the
    file and the manifest: render() on them gives the text as the chapter's tree holds it."""

    def __init__(self, lines: list[tuple[str, Condition]], path: str, manifest: Manifest):
        super().__init__(lines)
        self.path = path
        self.manifest = manifest


def render(lines: list[tuple[str, Condition]], n: int) -> str:
    """The text at chapter n. Lines from Manifest.parsed: as the tree after chapter n holds the
    file (markers, then the derived imports); lines from parse_markers alone: markers only."""
    if isinstance(lines, FileLines):
        return lines.manifest.text_at(lines.path, n)
    return apply_markers(lines, n)


@dataclass
class Manifest:
    root: Path
    chapters: list[Chapter]
    added_in: dict[str, int] = field(default_factory=dict)  # path -> chapter that adds it
    rewritten_in: dict[str, list[int]] = field(default_factory=dict)  # path -> chapters, in order
    _parsed: dict[str, FileLines] = field(default_factory=dict, repr=False)
    _texts: dict[tuple[str, int], str] = field(default_factory=dict, repr=False)
    _names: dict[tuple[str, int], frozenset[str] | None] = field(default_factory=dict, repr=False)
    _changed: dict[str, set[int]] = field(default_factory=dict, repr=False)

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

    def files_at(self, n: int) -> list[str]:
        """Every file the manifest puts into the tree after chapter n, support files aside."""
        return [path for ch in self.upto(n) for path in ch.added()]

    def versions(self, path: str) -> list[Version]:
        """Where the text of `path` comes from, chapter by chapter; one version unless rewritten."""
        rewrites = self.rewritten_in.get(path, [])
        firsts = [self.added_in.get(path, 0), *rewrites]
        sources = [older_version(path, m) for m in rewrites] + [path]
        return [Version(*v) for v in zip(sources, firsts, [*rewrites, None])]

    def parsed(self, path: str) -> FileLines:
        """The file's lines, each with the condition under which it exists (cached).

        For a rewritten file: the lines of every version, each also bound to its version's chapters.
        """
        if path not in self._parsed:
            versions = self.versions(path)
            if len(versions) == 1:
                lines: list[tuple[str, Condition]] = list(self.parse(path))
            else:
                lines = [(line, InVersion(v.first, v.until, cond))
                         for v in versions for line, cond in self.parse(v.source)]
            self._parsed[path] = FileLines(lines, path, self)
        return self._parsed[path]

    def parse(self, source: str) -> list[tuple[str, Cond | None]]:
        """The markers of one file as it is on disk (one version of a rewritten file)."""
        file = self.root / source
        text = read_text(file) if file.is_file() else ""  # a missing file is reported elsewhere
        return parse_markers(text, source)

    def text_at(self, path: str, n: int) -> str:
        """The text of `path` in the tree after chapter n (cached): markers, then derivation."""
        key = (path, n)
        if key not in self._texts:
            marked = apply_markers(self.parsed(path), n)
            self._texts[key] = derive(marked, path, self.modules_at(n), n)
        return self._texts[key]

    def modules_at(self, n: int) -> TreeModules:
        package = [p for p in self.files_at(n) if p.startswith(PACKAGE)]
        return TreeModules(
            name=PACKAGE.rstrip("/").rsplit("/", 1)[-1], folder=PACKAGE,
            known=frozenset(p for p in self.added_in if p.startswith(PACKAGE)),
            present=frozenset(package), names_in=lambda path: self.names_in(path, n),
        )

    def names_in(self, path: str, n: int) -> frozenset[str] | None:
        """The top-level names of the package file `path` in the tree after chapter n (None:
        cannot tell, which keeps the imports from it)."""
        key = (path, n)
        if key not in self._names:
            self._names[key] = None  # while it is worked out: modules that import each other
            self._names[key] = top_level_names(self.text_at(path, n))
        return self._names[key]


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


def changed_in(manifest: Manifest, path: str) -> set[int]:
    """The chapters that change `path`: by a rewrite, a marker, or an import the tree derives
    (a chapter that adds a module brings back the imports of it)."""
    if path in manifest._changed:
        return manifest._changed[path]
    found = set(manifest.rewritten_in.get(path, []))
    for _, cond in manifest.parsed(path):
        marker = cond.marker if isinstance(cond, InVersion) else cond
        if marker is not None:
            found.add(marker.chapter)
    if path.endswith(".py") and path in manifest.added_in:
        numbers = [ch.number for ch in manifest.chapters if ch.number >= manifest.added_in[path]]
        for previous, n in zip(numbers, numbers[1:]):
            if n not in found and manifest.text_at(path, n) != manifest.text_at(path, previous):
                found.add(n)
    manifest._changed[path] = found
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
