"""Build the source tree as it stands after chapter N, show it, and check it.

The repository holds one source tree: the final engine. `tools/chapters.toml` says which files each
chapter adds (`files`, plus `early` for files a chapter needs before the chapter that explains
them), its main and its tests. Lines that a later chapter adds carry chapter markers. A marker is
a whole line, a `#` or `//` comment whose text is one of

    >>> chNN            the lines up to `<<< chNN` exist from chapter NN on
    <<< chNN

For example, the hook that chapter NN adds to a function:

    def __call__(self, *args):
        #  >>> chNN
        if hook.installed is not None:
            return hook.installed.run(self, args)
        #  <<< chNN
        ...

NN is a chapter number (`ch5` and `ch05` are the same). Marker lines never appear in a built tree,
and blocks do not nest.

Some lines need no marker, because the tree after chapter N derives them (tools/steps_derive.py
has the rules): a top-level import of a package module the tree does not have yet, or of a name
that a module of the tree does not define yet, is left out, and so is a decorator whose name only
such an import brought in. In the example, `from . import hook` needs no marker: before chapter
NN, the tree has no minisgl/ops/hook.py.

Code that a chapter replaces, rather than adds to, is not kept commented out in the source: the
chapter lists the path under `rewrites` in its manifest entry, and the older version is kept, as
ordinary code, at

    tools/chapters/before-chNN/<path>     the whole file as it stands before chapter NN

Trees before chapter NN take that file in place of `<path>`; the source tree holds only the final
version. The older version may carry markers of its own for the chapters it lives through, and a
file rewritten twice has one older version per rewrite. (The tool still reads a `>>> before chNN`
/ `<<< before chNN` block, lines commented out that exist only before chapter NN, but `list` warns
about one in the source tree.) A file is *modified* in chapter N when it was added in an earlier
chapter and N rewrites it, it carries a marker for N, or N brings back one of its derived imports.

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

The work is split by responsibility, each module next to this one:

    steps_markers.py        parse a file's markers, apply them at a chapter
    steps_derive.py         the imports and decorators a chapter's tree derives by itself
    steps_manifest.py       the manifest, file versions, a file's text at a chapter
    steps_validate.py       what `list` reports and what stops a build
    steps_build.py          materialize: the files of a tree and their text
    steps_show.py           `list` and `tree`
    steps_check.py          `check`: run each tree's main and tests, proven-on-final-code
    steps_run.py            run one step and show its output as it comes
    steps_timing.py         the previous run's timings and the estimate of what is left
    steps_child.py          the checked processes' environment; the hook they run first is
    steps_sitecustomize.py  (installed as their sitecustomize.py: isolation, files read)
    steps_proof.py          the record of passing runs

This module is the command line and keeps every name the other tools and the tests use.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # loaded by path (tests, docs hooks)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

# ruff: noqa: E402, F401  (the names below are this module's interface, re-exported)
import steps_proof
from steps_build import FINAL, file_at_chapter, files_at, final_bytes, materialize
from steps_build import is_record as _is_record
from steps_check import (
    NATIVE,
    PYTEST_INPUTS,
    ChapterCheck,
    Proof,
    check,
    check_chapter,
    closing_words,
    same_as_final,
    used_files,
    used_folders,
)
from steps_child import SITECUSTOMIZE, child_env
from steps_derive import TreeModules, derive
from steps_manifest import (
    LAST_PLANNED_CHAPTER,
    PACKAGE,
    REPO,
    SUPPORT,
    Chapter,
    FileLines,
    Manifest,
    Version,
    changed_in,
    is_text,
    load_manifest,
    older_version,
    read_text,
    render,
)
from steps_markers import (
    COMMENTED,
    LOOKS_LIKE_MARKER,
    MARKER,
    Cond,
    Condition,
    InVersion,
    StepsError,
    apply_markers,
    parse_markers,
    read_marker,
)
from steps_run import HEARTBEAT_S, StepResult, heartbeat_seconds, indent, run_step
from steps_run import duration as _duration
from steps_show import (
    EARLY,
    LIST_COLUMNS,
    MODIFIED,
    NEW,
    exercises,
    header_line,
    list_lines,
    status,
    tree_text,
)
from steps_timing import Progress, load_timings, save_timing, timings_path
from steps_validate import Problem, fail_on_errors, validate

# Modules that a chapter's main or tests import and that `pip install -r requirements.txt` alone
# does not bring, with the first chapter that needs them: checked before anything runs, so that a
# missing one costs a line, not minutes of checking.
NEEDS = {"pytest": 1, "flashinfer_bench": 19}
SETUP = "python tools/setup_env.py"


def missing_modules(numbers: list[int]) -> list[str]:
    last = max(numbers)
    return [name for name, first in NEEDS.items()
            if first <= last and importlib.util.find_spec(name) is None]


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
    chk.add_argument("--timeout", type=float, default=2400,
                     help="seconds per main or test run (default: %(default)g)")
    chk.add_argument(
        "--record-proven", type=Path, metavar="FILE",
        help="write the test files proven on final code to FILE, one per line (default: none)",
    )
    chk.add_argument("--jobs", "-j", type=int, default=1, metavar="N",
                     help="chapters checked side by side, each shown whole when it ends "
                     "(default: %(default)s, one after the other with live progress)")
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
                           args.rerun, args.jobs)
            return 0 if passed else 1
    except StepsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
