"""Run the test files on the final tree (the repository), each proven by record or run.

    python tools/final_tests.py [--skip FILE] [--rerun] [--jobs N] [TEST_FILE ...]

Every test file under tests/ runs in a pytest process of its own, with the hook of
`tools/steps.py check` recording which files of the repository it reads and which folders it
lists. When it passes, that record goes into tools/chapters/proven.json (see
tools/steps_proof.py) under "final tests/test_x.py". The next time, a file whose recorded inputs
(and environment) are all unchanged is *proven by record* and not run again; anything changed,
added or missing runs it. `--skip FILE` names test files that `steps.py check` proved on final
code already (one per line), `--rerun` runs every file.

The repository's content is what git tracks plus untracked files it does not ignore, so build
outputs (bytecode, model caches, egg-info) count neither as inputs nor in folder listings: a clean
clone and a working copy agree.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import steps  # noqa: E402
import steps_proof  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def repository_files(root: Path) -> list[str]:
    """The repository's files as a clean clone has them (plus new files git does not ignore),
    less the record itself, which the runs write rather than read."""
    return [p for p in _listed(root) if not steps._is_record(p)]


def _listed(root: Path) -> list[str]:
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                                 "--exclude-standard"], cwd=root, capture_output=True,
                                check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                      if p.is_file() and ".git" not in p.parts)
    return sorted({name for name in listed.decode().split("\0") if name
                   and (root / name).is_file()})


def snapshot(root: Path, files: list[str]) -> steps_proof.Snapshot:
    """Digests of the files, and of each folder's entries as the file list has them."""
    children: dict[str, set[str]] = {"": set()}
    for path in files:
        parts = path.split("/")
        for depth in range(len(parts)):
            folder = "/".join(parts[:depth])
            children.setdefault(folder, set()).add(parts[depth])
    folders = {folder: steps_proof.names_digest(sorted(names))
               for folder, names in children.items()}
    return steps_proof.Snapshot({p: steps_proof.file_digest(root / p) for p in files}, folders)


def test_files(files: list[str]) -> list[str]:
    return [p for p in files if p.startswith("tests/") and p.rsplit("/", 1)[-1].startswith("test_")
            and p.endswith(".py")]


def used(record: Path, test: str, repo_files: list[str]) -> steps_proof.Reads:
    reads = steps_proof.Reads.of(record)
    reads.files |= {test, *steps.PYTEST_INPUTS}
    if any(path.endswith(steps.NATIVE) for path in reads.files):  # headers a compiler reads
        reads.files |= {path for path in repo_files if path.endswith(steps.NATIVE)}
    return reads


def run(root: Path, tests: list[str], skip: set[str], rerun: bool, timeout: float,
        jobs: int = 1) -> bool:
    repo_files = repository_files(root)
    fresh = snapshot(root, repo_files)
    proof = steps.Proof.load(root, rerun)
    todo = [t for t in (tests or test_files(repo_files)) if t not in skip]
    workdir = Path(tempfile.mkdtemp(prefix="minisgl-final-"))
    site = workdir / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(steps.SITECUSTOMIZE, encoding="utf-8")
    env = steps.child_env(root, site, root)
    failed, by_record, started = [], [], time.monotonic()
    lock = threading.Lock()  # one file's lines at a time, one writer of the record

    def head(i: int, test: str) -> str:
        return f"[{i}/{len(todo)} · {steps._duration(time.monotonic() - started)}] {test}"

    def one(i: int, test: str, why: str) -> None:
        key = f"final {test}"
        record = workdir / f"used-{i}.txt"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
        side_by_side = jobs > 1
        with lock:
            print(f"{head(i, test)}: {why}: runs", flush=True)
        result = steps.run_step(command, root, {**env, "MINISGL_STEPS_RECORD": str(record)},
                                timeout, echo=not side_by_side,
                                label=test if side_by_side else None)
        with lock:
            if side_by_side:  # its output in one piece, once it is done
                print(f"{head(i, test)}: its output", flush=True)
                print(steps.indent(result.output.rstrip()), flush=True)
            print(f"   {test} {'ok' if result.ok else 'FAIL'} ({result.seconds:.1f}s)", flush=True)
            if result.ok:
                reads = used(record, test, repo_files)
                proof.record.put(key, steps_proof.Inputs.of(fresh, reads.files, reads.folders,
                                                             reads.packages), proof.env)
            else:
                failed.append(test)
                proof.record.forget(key)
            proof.record.save()

    runs = []
    for i, test in enumerate(todo, start=1):
        why = proof.why_not_proven(f"final {test}", fresh)
        if why is None:
            by_record.append(test)
            print(f"{head(i, test)}: its recorded inputs are unchanged: proven by record",
                  flush=True)
        else:
            runs.append((i, test, why))
    # Side by side (--jobs 2 on two cores): most files wait on servers, subprocesses and sockets
    # for much of their time, so two at once finish sooner than one after the other.
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for done in [pool.submit(one, *job) for job in runs]:
            done.result()
    print(f"{len(todo) - len(failed)}/{len(todo)} test files passed on the final tree "
          f"({steps._duration(time.monotonic() - started)}, {max(1, jobs)} at a time); proven by "
          f"record, not run: {len(by_record)}; skipped as proven by the chapter checks: "
          f"{len(skip)}")
    for test in sorted(failed):
        print(f"   FAILED {test}")
    return not failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tests", nargs="*", help="test files (default: every tests/test_*.py)")
    parser.add_argument("--skip", type=Path, metavar="FILE",
                        help="a file naming test files not to run, one per line")
    parser.add_argument("--rerun", action="store_true", help="run every file, proven or not")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per test file")
    parser.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                        help="test files run side by side (default 1)")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    skip = set(args.skip.read_text().split()) if args.skip else set()
    return 0 if run(args.root.resolve(), args.tests, skip, args.rerun, args.timeout,
                    args.jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
