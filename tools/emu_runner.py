"""The CPU emulator's build and run: stage a program (rewritten by tools/emu_rewrite.py) and the
local headers it includes into the cache, compile and link it against the runtime in tools/emu/,
and run it with its output streaming through.

tools/emu_kernels.py (the command line) and tools/emu_trace.py (the FlashInfer Trace set) both
build on this module, and neither imports the other.
"""

from __future__ import annotations

import codecs
import functools
import hashlib
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from emu_rewrite import RewriteError, rewrite_source

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNTIME_DIR = REPO_ROOT / "tools" / "emu"
CSRC_DIR = REPO_ROOT / "python" / "minisgl" / "kernel" / "csrc"

COMMON_FLAGS = ["-std=c++17", "-fno-strict-aliasing", "-pthread"]
PROGRAM_FLAGS = [*COMMON_FLAGS, "-O1"]
RUNTIME_FLAGS = [*COMMON_FLAGS, "-O2"]
DEFAULT_TIMEOUT_S = 600


# ---------------------------------------------------------------------------------------------
# Staging: the program and every local header it includes are rewritten into the cache; the
# #include lines of the copies point at the other copies.
# ---------------------------------------------------------------------------------------------
def cache_root() -> Path:
    base = os.environ.get("MINISGL_CACHE_DIR")
    if base:
        return Path(base).expanduser() / "emu"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "minisgl" / "emu"


def _short_hash(text: str, n: int = 16) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


class Stager:
    def __init__(self, main: Path):
        self.main = main
        self.dir = cache_root() / "stage" / f"{main.stem}-{_short_hash(str(main))}"
        self.include_dirs = [main.parent, CSRC_DIR]
        self.staged: dict[Path, Path] = {}
        self.contents: dict[Path, str] = {}

    def stage(self, path: Path) -> Path:
        if path in self.staged:
            return self.staged[path]
        name = (
            f"{path.stem}.emu.cpp"
            if path == self.main
            else f"{_short_hash(str(path), 10)}_{path.name}"
        )
        target = self.dir / name
        self.staged[path] = target  # before recursing: include cycles end here
        src = path.read_text(encoding="utf-8", errors="replace")

        def include_edit(quote: str, name: str) -> str | None:
            dirs = ([path.parent] if quote == '"' else []) + self.include_dirs
            for d in dirs:
                candidate = (d / name).resolve()
                if candidate.is_file() and RUNTIME_DIR not in candidate.parents:
                    return str(self.stage(candidate))
            return None

        body = rewrite_source(src, str(path), include_edit)
        self.contents[target] = f'#line 1 "{path}"\n{body}'
        return target

    def write(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for target, text in self.contents.items():
            if not target.exists() or target.read_text(encoding="utf-8") != text:
                _atomic_write(target, text.encode())


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Building, with a cache keyed by everything that goes into the binary.
# ---------------------------------------------------------------------------------------------
def compiler() -> str:
    return os.environ.get("CXX", "g++")


@functools.cache
def compiler_id() -> str:
    try:
        out = subprocess.run([compiler(), "--version"], capture_output=True, text=True, check=False)
        return out.stdout.splitlines()[0] if out.stdout else compiler()
    except OSError:
        return compiler()


def runtime_digest() -> str:
    h = hashlib.sha256()
    for p in sorted(RUNTIME_DIR.iterdir()):
        if p.is_file() and p.suffix in (".h", ".cpp"):
            h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def _compile(cmd: list[str], output: Path, echo: bool) -> tuple[bool, str]:
    """Runs one compiler command writing to a temporary file, then moves it into place."""
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    output.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([*cmd, "-o", str(tmp)], capture_output=True, text=True, check=False)
    if echo and proc.stderr:
        sys.stderr.write(proc.stderr)
        sys.stderr.flush()
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        return False, proc.stderr
    os.replace(tmp, output)
    return True, proc.stderr


def build_runtime(echo: bool) -> tuple[Path | None, str]:
    key = _short_hash(compiler_id() + " ".join(RUNTIME_FLAGS) + runtime_digest(), 20)
    obj = cache_root() / "rt" / key / "emu_runtime.o"
    if obj.exists():
        return obj, ""
    cmd = [
        compiler(),
        *RUNTIME_FLAGS,
        "-I",
        str(RUNTIME_DIR),
        "-c",
        str(RUNTIME_DIR / "emu_runtime.cpp"),
    ]
    ok, log = _compile(cmd, obj, echo)
    return (obj if ok else None), log


def cuda_version_flags() -> list[str]:
    """MINISGL_EMU_CUDA_VERSION=12.4 (or 12040, or 12) makes the emulator imitate that CUDA version
    instead of 13.0; it changes e.g. which error a bad launch shape reports."""
    text = os.environ.get("MINISGL_EMU_CUDA_VERSION", "").strip()
    if not text:
        return []
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?", text)
    if not m:
        raise ValueError(f"MINISGL_EMU_CUDA_VERSION={text!r} is not a version like 12.4 or 12040")
    major, minor = int(m.group(1)), int(m.group(2) or 0)
    version = major if major >= 1000 else major * 1000 + minor * 10
    return [f"-DMINISGL_EMU_CUDA_VERSION={version}"]


def _stage(path: Path) -> tuple[Stager, Path, list[str], str]:
    """Rewrites one program's sources into the staging folder (not yet written); returns the
    stager, the staged main file, the compiler flags and a digest of everything that goes into
    the build, so an unchanged program is never compiled twice."""
    stager = Stager(path)
    main = stager.stage(path)
    flags = [*PROGRAM_FLAGS, *cuda_version_flags()]
    h = hashlib.sha256()
    for part in (compiler_id(), " ".join(flags), runtime_digest(), str(CSRC_DIR)):
        h.update(part.encode() + b"\0")
    for target in sorted(stager.contents):
        h.update(str(target).encode() + b"\0" + stager.contents[target].encode() + b"\0")
    return stager, main, flags, h.hexdigest()[:20]


def _source_flags(path: Path, flags: list[str]) -> list[str]:
    return [compiler(), *flags, "-include", str(RUNTIME_DIR / "emu_cuda.h"), "-I", str(path.parent),
            "-I", str(CSRC_DIR), "-I", str(RUNTIME_DIR), "-x", "c++"]


def build(path: Path, echo: bool = True) -> tuple[Path | None, str]:
    """Rewrites, stages and compiles one program; returns (binary or None, compiler output)."""
    runtime, log = build_runtime(echo)
    if runtime is None:
        return None, log
    try:
        stager, main, flags, digest = _stage(path)
    except (RewriteError, OSError) as e:
        return None, f"emu: {e}\n"
    binary = cache_root() / "bin" / digest / path.stem
    if binary.exists():
        return binary, ""
    stager.write()
    cmd = [*_source_flags(path, flags), str(main), "-x", "none", str(runtime)]
    ok, log = _compile(cmd, binary, echo)
    return (binary if ok else None), log


def compile_unit(path: Path, echo: bool = True) -> tuple[Path | None, str]:
    """Rewrites, stages and compiles one translation unit to an object file (`-c`): for programs
    built from several units that must not see each other's text (the practice judge compiles
    a learner's kernels apart from the test program that checks them)."""
    try:
        stager, main, flags, digest = _stage(path)
    except (RewriteError, OSError) as e:
        return None, f"emu: {e}\n"
    obj = cache_root() / "obj" / digest / f"{path.stem}.o"
    if obj.exists():
        return obj, ""
    stager.write()
    cmd = [*_source_flags(path, flags), "-c", str(main)]
    ok, log = _compile(cmd, obj, echo)
    return (obj if ok else None), log


def link(objects: list[Path], name: str, echo: bool = True) -> tuple[Path | None, str]:
    """Links object files from compile_unit with the runtime, in the order given (for symbols
    defined in several objects, such as inline functions, the first object's copy is kept)."""
    runtime, log = build_runtime(echo)
    if runtime is None:
        return None, log
    h = hashlib.sha256()
    for obj in [*objects, runtime]:
        h.update(obj.read_bytes() + b"\0")
    binary = cache_root() / "bin" / h.hexdigest()[:20] / name
    if binary.exists():
        return binary, ""
    cmd = [compiler(), *COMMON_FLAGS, *(str(o) for o in objects), str(runtime)]
    ok, log = _compile(cmd, binary, echo)
    return (binary if ok else None), log


# ---------------------------------------------------------------------------------------------
# Running.
# ---------------------------------------------------------------------------------------------
@dataclass
class RunResult:
    path: Path
    ok: bool = False
    compiled: bool = False
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    kernels: int = 0
    emu_errors: int = 0
    reported: bool = False  # the runtime wrote its report file (kernels=, errors=) at exit
    reason: str = ""

    def summary(self) -> str:
        shown = display(self.path)
        if self.ok:
            plural = "" if self.kernels == 1 else "s"
            return f"emu: ok ({self.kernels} kernel{plural}) {shown}"
        return f"emu: FAILED {shown}: {self.reason}"


def display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _pump(stream, sink, chunks: list[str]) -> None:
    """Copies a child's pipe to `sink` as the bytes arrive, and keeps a copy."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while data := os.read(stream.fileno(), 65536):
        text = decoder.decode(data)
        chunks.append(text)
        if sink is not None:
            sink.write(text)
            sink.flush()
    tail = decoder.decode(b"", final=True)
    chunks.append(tail)
    if sink is not None and tail:
        sink.write(tail)


def _read_report(path: Path) -> dict[str, int] | None:
    """The runtime's report; None if missing or not a plain file (the program could have put a
    link or a FIFO there: never follow one, never block on one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        lines = os.read(fd, 4096).decode("utf-8", errors="replace").split()
    finally:
        os.close(fd)
    fields = dict(line.split("=", 1) for line in lines if "=" in line)
    return {k: int(v) for k, v in fields.items() if v.lstrip("-").isdigit()}


def _run_binary(binary: Path, result: RunResult, echo: bool, timeout: float,
                preexec=None, args: tuple[str, ...] = (), stdin=None,
                pass_fds: tuple[int, ...] = ()) -> None:
    fd, report_name = tempfile.mkstemp(prefix="emu-report-", suffix=".txt")
    os.close(fd)
    report = Path(report_name)
    report.unlink()
    env = dict(os.environ, MINISGL_EMU_REPORT=str(report))
    out: list[str] = []
    err: list[str] = []
    try:
        proc = subprocess.Popen(
            [str(binary), *args], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, preexec_fn=preexec, pass_fds=pass_fds,
        )
        pumps = [
            threading.Thread(target=_pump, args=(proc.stdout, sys.stdout if echo else None, out)),
            threading.Thread(target=_pump, args=(proc.stderr, sys.stderr if echo else None, err)),
        ]
        for t in pumps:
            t.start()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            result.reason = f"timed out after {timeout:g} s"
        for t in pumps:
            t.join()
        result.returncode = proc.returncode
        result.stdout, result.stderr = "".join(out), "".join(err)
        fields = _read_report(report)
    finally:
        report.unlink(missing_ok=True)
    result.reported = fields is not None
    if fields is not None:
        result.kernels = fields.get("kernels", 0)
        result.emu_errors = fields.get("errors", 0)
    if result.reason:
        return
    if result.emu_errors:
        result.reason = "the emulator reported an error (see the `emu: error:` lines above)"
    elif result.returncode != 0:
        rc = result.returncode
        result.reason = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
    elif fields is None:
        result.reason = "the program ended without the emulator's report"
    else:
        result.ok = True


def execute(path: str | Path, echo: bool = True, timeout: float | None = None) -> RunResult:
    """Builds and runs one program. With echo, its output streams to our stdout/stderr and a
    summary line follows on stderr; the result carries the captured output either way."""
    path = Path(path).resolve()
    result = RunResult(path)
    if timeout is None:
        timeout = float(os.environ.get("MINISGL_EMU_TIMEOUT", DEFAULT_TIMEOUT_S))
    if not path.is_file():
        result.reason = "no such file"
    else:
        binary, log = build(path, echo)
        result.stderr = "" if echo else log
        if binary is None:
            result.reason = "does not compile"
        else:
            result.compiled = True
            _run_binary(binary, result, echo, timeout)
    if echo:
        sys.stdout.flush()
        sys.stderr.write(result.summary() + "\n")
        sys.stderr.flush()
    return result


def execute_binary(binary: Path, path: str | Path, echo: bool = True,
                   timeout: float | None = None, preexec=None, args: tuple[str, ...] = (),
                   stdin=None, pass_fds: tuple[int, ...] = ()) -> RunResult:
    """Runs a binary made by link() (`path` names the program in messages) with `args`.
    `preexec` runs in the child before exec (the practice judge restricts what the program may
    write there); `stdin` (a descriptor) and `pass_fds` are given to the program as in Popen
    (the judge feeds a case on stdin and reads the program's data from a descriptor it passes)."""
    result = RunResult(Path(path), compiled=True)
    if timeout is None:
        timeout = float(os.environ.get("MINISGL_EMU_TIMEOUT", DEFAULT_TIMEOUT_S))
    _run_binary(binary, result, echo, timeout, preexec, tuple(args), stdin, tuple(pass_fds))
    return result


def run(path: str | Path) -> bool:
    """Compiles and runs one CUDA program on the emulator, streaming its output. True iff it
    compiled, ran, exited 0 and the emulator reported no error."""
    return execute(path).ok
