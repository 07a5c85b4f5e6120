"""What `steps.py list` and `steps.py tree` print: per chapter, the files it adds and changes."""

from __future__ import annotations

import tomllib
from pathlib import Path

from steps_build import files_at
from steps_manifest import PACKAGE, Manifest, changed_in, load_manifest
from steps_markers import StepsError
from steps_validate import fail_on_errors

NEW, MODIFIED, EARLY = "本章新建", "本章修改", "提前引入"


def status(manifest: Manifest, path: str, n: int) -> str | None:
    """How chapter n touches `path`: NEW, MODIFIED, EARLY or None."""
    added = manifest.added_in[path]
    if added == n:
        return EARLY if path in manifest.chapter(n).early else NEW
    return MODIFIED if n in changed_in(manifest, path) else None


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
