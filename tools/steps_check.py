"""`steps.py check`: build each chapter's tree, run its main and tests there, and say what it means.

A chapter's run reads files of its tree (the hook in tools/steps_sitecustomize.py records which);
when they pass and every file read is the same in the final tree, the tests are proven on final
code. The record of passing runs (tools/steps_proof.py) lets a later check skip a chapter whose
inputs have not changed.
"""

from __future__ import annotations

import io
import shutil
import sys
import tempfile
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import steps_proof
from steps_build import final_bytes, materialize
from steps_child import SITECUSTOMIZE, child_env
from steps_manifest import Chapter, Manifest
from steps_markers import StepsError
from steps_run import indent, run_step
from steps_timing import Progress, load_timings


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
        print(f"   tree   FAIL\n{indent(str(e))}", flush=True)
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
    site_dir = workdir / f"site-ch{n:02d}"  # one per chapter: chapters may run side by side
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
        with _SHARED:
            progress.finish(step, result.seconds)
        last = result.output.strip().splitlines()[-1:] or [""]
        verdict = "ok" if result.ok else "FAIL"
        prefix = f"   {label}  " if echo or result.broke_line else ""
        summary = last[0].strip("= ")  # pytest's last line without its ==== banner
        print(f"{prefix}{verdict} ({result.seconds:.1f}s)  {summary[:80]}", flush=True)
        if not result.ok:
            ok = False
            if not echo:  # echoed output is on the screen already
                print(indent("\n".join(result.output.rstrip().splitlines()[-40:])), flush=True)
    found = ChapterCheck(ch.tests, ok)
    if proof is not None:
        with _SHARED:
            _record(proof, ok, n, ch, tree, record, main_record, manifest, fresh)
    if ok and ch.tests:
        found = _compare_with_final(manifest, tree, found,
                                    used_files(ch, tree, record, manifest.root))
    return found


# Held while one chapter writes what chapters share: the record and the timings file.
_SHARED = threading.Lock()


def _record(proof: Proof, ok: bool, n: int, ch: Chapter, tree: Path, record: Path,
            main_record: Path, manifest: Manifest, fresh: steps_proof.Snapshot) -> None:
    """A passing run goes into the record with every file and folder it read; a failing one
    takes the chapter's entry out."""
    if ok:
        both = steps_proof.Reads.of(record, main_record)
        files = {*used_files(ch, tree, record, manifest.root), ch.main, *both.files}
        proof.record.put(f"ch{n:02d}", steps_proof.Inputs.of(fresh, files, both.folders,
                                                             both.packages), proof.env)
    else:
        proof.record.forget(f"ch{n:02d}")
    proof.record.save()


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


def used_files(ch: Chapter, tree: Path, record: Path, root: Path) -> list[str]:
    """The files of the tree that the chapter's test run read or looked for, relative to it.

    Folders do not count: opening one reads no content, and a name that os.open resolves
    against a folder descriptor (shutil.rmtree opens every folder it removes so) reaches the
    record as if it were relative to the tree, since the audit event does not carry the
    descriptor."""
    used = steps_proof.Reads.of(record).files | {*ch.tests, *PYTEST_INPUTS}
    if any(path.endswith(NATIVE) for path in used):
        used |= {file.relative_to(tree).as_posix() for file in tree.rglob("*")
                 if file.is_file() and file.name.endswith(NATIVE)}
    return sorted(path for path in used if not (tree / path).is_dir()
                  and not (root / path).is_dir())


def used_folders(record: Path) -> set[str]:
    """The folders of the tree whose entries the run listed, relative to it ("" for the tree)."""
    return steps_proof.Reads.of(record).folders


def same_as_final(manifest: Manifest, tree: Path, path: str) -> bool:
    """Whether the file `path` is in the chapter tree as in the final tree (the repository),
    or absent from both.

    Marker lines and commented-out `before` blocks aside: a file whose markers all belong to
    this chapter or earlier ones holds the same code in both trees."""
    here, final = tree / path, manifest.root / path
    if not (here.is_file() and final.is_file()):
        return here.exists() == final.exists()
    return here.read_bytes() == final_bytes(manifest, path)


def check(
    manifest: Manifest, numbers: list[int], keep: bool, timeout: float,
    record_proven: Path | None = None, rerun: bool = False, jobs: int = 1,
) -> bool:
    """Check the chapters; one whose record still proves it is skipped unless `rerun`. With
    `jobs` > 1 that many chapters run at once, each shown whole when it ends."""
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
        if jobs <= 1:
            for i, n in enumerate(numbers, start=1):
                checks[n] = check_chapter(manifest, n, workdir, timeout, progress,
                                          f"{i}/{len(numbers)} · ", proof)
        else:
            checks = _side_by_side(manifest, numbers, workdir, timeout, progress, proof, jobs)
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


class _LinesByThread(io.TextIOBase):
    """sys.stdout while chapters run side by side: what a chapter's thread prints is kept in
    that thread's buffer and shown in one piece when the chapter ends, so no two chapters' lines
    mix; other threads print as usual."""

    def __init__(self, real: io.TextIOBase) -> None:
        self.real = real
        self.local = threading.local()

    def write(self, text: str) -> int:
        buffer = getattr(self.local, "buffer", None)
        (buffer if buffer is not None else self.real).write(text)
        return len(text)

    def flush(self) -> None:
        if getattr(self.local, "buffer", None) is None:
            self.real.flush()

    def for_this_thread(self) -> io.TextIOBase:
        """Where the calling thread's lines go (a step's output pump writes from a thread of
        its own, so it takes this at the start)."""
        buffer = getattr(self.local, "buffer", None)
        return buffer if buffer is not None else self.real


def _side_by_side(manifest: Manifest, numbers: list[int], workdir: Path, timeout: float,
                  progress: Progress, proof: Proof, jobs: int) -> dict[int, ChapterCheck]:
    """Check `jobs` chapters at a time (two cores: one chapter's servers and subprocesses wait
    much of the time, and the other chapter uses the core meanwhile)."""
    real = sys.stdout
    lines = _LinesByThread(real)
    shown = threading.Lock()

    def one(i: int, n: int) -> ChapterCheck:
        lines.local.buffer = io.StringIO()
        try:
            return check_chapter(manifest, n, workdir, timeout, progress,
                                 f"{i}/{len(numbers)} · ", proof)
        finally:
            text, lines.local.buffer = lines.local.buffer.getvalue(), None
            with shown:
                real.write(text)
                real.flush()

    print(f"{len(numbers)} chapters, {jobs} at a time: each chapter's lines appear when it "
          "ends", flush=True)
    sys.stdout = lines
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {n: pool.submit(one, i, n) for i, n in enumerate(numbers, start=1)}
            return {n: future.result() for n, future in futures.items()}
    finally:
        sys.stdout = real


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
