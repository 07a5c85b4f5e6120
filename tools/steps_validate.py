"""Checks of the manifest and the markers: what `steps.py list` reports below its table, and what
stops a tree from being built."""

from __future__ import annotations

from dataclasses import dataclass

from steps_manifest import LAST_PLANNED_CHAPTER, PACKAGE, Manifest, Version, older_version
from steps_markers import StepsError, read_marker


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
                conds = [cond for _, cond in manifest.parse(version.source) if cond]
            except StepsError as e:
                problems.append(Problem(True, str(e), added))
                continue
            for m in sorted({cond.chapter for cond in conds}):
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
            if version.until is None and any(cond.before for cond in conds):
                problems.append(_before_block_in_source(manifest, path))
    problems += _unlisted_package_files(manifest)
    return problems


def _span(version: Version) -> str:
    if version.until is None:
        return f"from chapter {version.first} on"
    return f"in chapters {version.first} to {version.until - 1}"


def _before_block_in_source(manifest: Manifest, path: str) -> Problem:
    """The source tree is the final engine, with no commented-out older code in it."""
    lines = (manifest.root / path).read_text(encoding="utf-8").splitlines()
    number, chapter = next(
        (i, marker[1].chapter) for i, line in enumerate(lines, start=1)
        if (marker := read_marker(line, f"{path}:{i}")) and marker[1].before
    )
    return Problem(
        False,
        f"{path}:{number}: a `before ch{chapter:02d}` block leaves older code, commented out, in "
        f"the source tree: keep that version whole at {older_version(path, chapter)} and list "
        f"{path} under chapter {chapter}'s `rewrites`",
    )


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
