"""Build the tree after chapter N: which files it holds and what each one says."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import steps_proof
from steps_manifest import PACKAGE, SUPPORT, Manifest, is_text, load_manifest, render
from steps_markers import StepsError
from steps_validate import fail_on_errors

FINAL = sys.maxsize  # a chapter after every other one: render(lines, FINAL) is the final engine


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
    return manifest.files_at(n)


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
                if file.is_file() and "__pycache__" not in rel and not is_record(rel):
                    _write(manifest, rel, n, dest, markers=item != "tools")
    return dest


def is_record(rel: str) -> bool:
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


def final_bytes(manifest: Manifest, path: str) -> bytes:
    """The file as a tree after every chapter, planned ones included, would hold it."""
    source = manifest.root / path
    marked = path in manifest.added_in or any(
        path == item or path.startswith(item + "/") for item in SUPPORT if item != "tools"
    )  # as materialize writes them: tools/ is copied as it is
    if marked and is_text(source):
        return render(manifest.parsed(path), FINAL).encode("utf-8")
    return source.read_bytes()
