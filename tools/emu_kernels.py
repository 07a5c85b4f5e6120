#!/usr/bin/env python3
"""Run unmodified CUDA C++ programs on the CPU, with every CUDA thread a coroutine.

    python tools/emu_kernels.py                    # every *.cu directly in tests/cuda/
    python tools/emu_kernels.py a.cu b.cu          # these programs
    python tools/emu_kernels.py --trace-dir DIR    # also a FlashInfer Trace set (emu_trace.py)

Each program is rewritten a little (kernel launches and __shared__ declarations become calls
into the runtime in tools/emu/), compiled with the machine's g++ against that runtime, and run.
Its stdout and stderr stream through unchanged; the emulator's own lines start with "emu:" and
go to stderr. The exit status is non-zero if any program fails to compile, exits non-zero, or
the emulator reports an error (out-of-bounds access, barrier divergence, deadlock, a warp
collective with a lane missing from its mask, ...). docs/appendix/emulator.md explains it all.

From Python: `run(path) -> bool`, or `execute(path, echo=False)` for the captured output.
"""

from __future__ import annotations

import argparse
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
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNTIME_DIR = REPO_ROOT / "tools" / "emu"
CSRC_DIR = REPO_ROOT / "python" / "minisgl" / "kernel" / "csrc"
DEFAULT_DIR = REPO_ROOT / "tests" / "cuda"

COMMON_FLAGS = ["-std=c++17", "-fno-strict-aliasing", "-pthread"]
PROGRAM_FLAGS = [*COMMON_FLAGS, "-O1"]
RUNTIME_FLAGS = [*COMMON_FLAGS, "-O2"]
DEFAULT_TIMEOUT_S = 600


class RewriteError(Exception):
    """CUDA syntax the rewrite does not understand; carries a file:line prefix."""


# ---------------------------------------------------------------------------------------------
# Lexing: a copy of the source with comments and literals blanked out, so that the rewrites
# below never match inside them. Blanking keeps every offset and newline where it was.
# ---------------------------------------------------------------------------------------------
def _is_ident(c: str) -> bool:
    return c.isalnum() or c == "_"


def _is_digit_separator(src: str, i: int) -> bool:
    """A quote inside a number such as 1'000'000 (C++14) is not a character literal."""
    j = i
    while j > 0 and (_is_ident(src[j - 1]) or src[j - 1] in "'."):
        j -= 1
    return j < i and src[j].isdigit()


def _literal_end(src: str, i: int) -> int:
    """Index just past the string or character literal that starts with the quote at i."""
    quote, j = src[i], i + 1
    while j < len(src) and src[j] != quote and src[j] != "\n":
        j += 2 if src[j] == "\\" else 1
    return min(j + 1, len(src))


def _raw_string_end(src: str, i: int) -> int:
    """Index just past the raw string literal R"delim( ... )delim" whose quote is at i."""
    paren = src.find("(", i)
    if paren < 0:
        return len(src)
    end = src.find(")" + src[i + 1 : paren] + '"', paren)
    return len(src) if end < 0 else end + paren - i + 1


def blank_non_code(src: str) -> str:
    out = list(src)

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif (
            c == '"'
            and i > 0
            and src[i - 1] == "R"
            and (i < 2 or not _is_ident(src[i - 2]) or src[i - 2] in "8LuU")
        ):
            j = _raw_string_end(src, i)
        elif c == '"' or (c == "'" and not _is_digit_separator(src, i)):
            j = _literal_end(src, i)
        else:
            i += 1
            continue
        blank(i, j)
        i = j
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Small scanners over blanked code.
# ---------------------------------------------------------------------------------------------
_OPEN = {"(": ")", "[": "]", "{": "}"}


def _line_of(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def _match_forward(code: str, i: int) -> int:
    """Index of the bracket closing the one at i (parentheses, brackets and braces)."""
    stack = []
    for j in range(i, len(code)):
        c = code[j]
        if c in _OPEN:
            stack.append(_OPEN[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return -1
            if not stack:
                return j
    return -1


def _skip_ws_back(code: str, i: int) -> int:
    while i > 0 and code[i - 1].isspace():
        i -= 1
    return i


def _skip_ws(code: str, i: int) -> int:
    while i < len(code) and code[i].isspace():
        i += 1
    return i


def _match_angle_back(code: str, close: int) -> int:
    """Index of the '<' opening the template argument list that ends with '>' at close."""
    depth = 0
    for j in range(close, -1, -1):
        c = code[j]
        if c in ">)]":
            depth += 1
        elif c in "<([":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _callee_start(code: str, end: int) -> int:
    """Start of the kernel expression before `<<<`: a possibly qualified name with template
    arguments, e.g. `ns::reduce<float, 256>`."""
    i = _skip_ws_back(code, end)
    while True:
        if i > 0 and code[i - 1] == ">":
            i = _match_angle_back(code, i - 1)
            if i < 0:
                return -1
            i = _skip_ws_back(code, i)
        j = i
        while j > 0 and _is_ident(code[j - 1]):
            j -= 1
        if j == i:
            return -1
        k = _skip_ws_back(code, j)
        if code[k - 2 : k] != "::":
            return j
        before = _skip_ws_back(code, k - 2)
        if before > 0 and (_is_ident(code[before - 1]) or code[before - 1] == ">"):
            i = before
            continue
        return k - 2


def _split_first_arg(code: str, start: int, end: int) -> int:
    """Offset of the first top-level comma in code[start:end], counting <> as brackets (the
    first argument of cudaFuncSetAttribute is a kernel name such as k<float, 128>)."""
    depth = 0
    for j in range(start, end):
        c = code[j]
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            depth -= 1
        elif c == "," and depth == 0:
            return j
    return -1


def canonical_name(text: str) -> str:
    """`k < float , 128 >` -> `k<float,128>`: the key under which function attributes and
    launches of one kernel meet, and the name the emulator prints."""
    t = re.sub(r"\s+", " ", text.strip())
    return re.sub(r"\s*([^\w\s])\s*", r"\1", t)


# ---------------------------------------------------------------------------------------------
# The rewrites. Each returns edits (start, end, replacement) against the original text; all
# replacements keep the number of newlines, so compiler messages point at the right lines.
# ---------------------------------------------------------------------------------------------
@dataclass(order=True)
class Edit:
    start: int
    end: int
    text: str = field(compare=False)


def _launch_edits(src: str, code: str, where: str) -> list[Edit]:
    edits, pos = [], 0
    while (i := code.find("<<<", pos)) >= 0:
        line = f"{where}:{_line_of(src, i)}"
        close_cfg = code.find(">>>", i + 3)
        paren = _skip_ws(code, close_cfg + 3) if close_cfg >= 0 else -1
        if paren < 0 or paren >= len(code) or code[paren] != "(":
            raise RewriteError(
                f"{line}: cannot parse the kernel launch (expected `k<<<...>>>(...)`)"
            )
        close = _match_forward(code, paren)
        start = _callee_start(code, i)
        if close < 0 or start < 0:
            raise RewriteError(
                f"{line}: cannot parse the kernel launch (expected `k<<<...>>>(...)`)"
            )
        callee = code[start:i].rstrip()
        config, args = src[i + 3 : close_cfg], src[paren + 1 : close]
        lam = f"[=](auto&&... emu_args_) {{ {callee}(emu_args_...); }}"
        rest = f", {args}" if args.strip() else args
        text = f'::emu::launch(::emu::launch_config({config}), "{canonical_name(callee)}", {lam}{rest})'
        edits.append(Edit(start, close + 1, text))
        pos = close + 1
    return edits


_EXTERN_SHARED = re.compile(r"\bextern\s+__shared__\b([^;{}]*?)\[\s*\]\s*;")
_ALIGN_SPEC = re.compile(r"\b(?:__align__|alignas)\s*\([^()]*\)")


def _extern_shared_edits(src: str, code: str, where: str) -> list[Edit]:
    """`extern __shared__ T name[];` -> a reference to the launch's dynamic shared memory."""
    edits = []
    for m in _EXTERN_SHARED.finditer(code):
        decl = _ALIGN_SPEC.sub(" ", m.group(1)).strip()
        name = re.search(r"([A-Za-z_]\w*)\s*$", decl)
        type_ = decl[: name.start()].strip() if name else ""
        if not name or not type_:
            raise RewriteError(
                f"{where}:{_line_of(src, m.start())}: cannot parse `extern __shared__` declaration"
            )
        text = (
            f"static {type_}* const& {name.group(1)} = "
            f"reinterpret_cast<{type_}* const&>(::emu::g_dyn_smem);"
        )
        edits.append(Edit(m.start(), m.end(), text + "\n" * src.count("\n", m.start(), m.end())))
    return edits


_STATIC_SHARED = re.compile(r"(?:\bstatic\s+)?\b__shared__\b(?:\s+static\b)?")


def _static_shared_edits(code: str) -> list[Edit]:
    """`__shared__` -> `static`. Blocks run one at a time, so a function-local static is exactly
    one per-block variable shared by all threads of the running block (and reused by the next)."""
    return [
        Edit(m.start(), m.end(), "static" + "\n" * m.group(0).count("\n"))
        for m in _STATIC_SHARED.finditer(code)
    ]


def _noinline_edits(code: str) -> list[Edit]:
    """`__noinline__` -> the GNU attribute (a macro would break libstdc++'s own use of the name)."""
    return [
        Edit(m.start(), m.end(), "__attribute__((noinline))")
        for m in re.finditer(r"\b__noinline__\b", code)
    ]


_SPECIFIERS = {
    "static",
    "inline",
    "__inline__",
    "__device__",
    "__host__",
    "__global__",
    "constexpr",
    "extern",
    "__noinline__",
    "__forceinline__",
}


_WORD_BEFORE = re.compile(r"\b(\w+)\s*$")
_WORD_AFTER = re.compile(r"\s*(\w+)")


def _specifiers_around(code: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """Spans of the declaration specifiers (static, inline, __device__, ...) right before
    code[start:end] and right after it."""
    spans, pos = [], start
    while (t := _WORD_BEFORE.search(code, max(0, pos - 64), pos)) and t.group(1) in _SPECIFIERS:
        spans.append((t.start(1), t.end(1), t.group(1)))
        pos = t.start(1)
    pos = end
    while (t := _WORD_AFTER.match(code, pos)) and t.group(1) in _SPECIFIERS:
        spans.append((t.start(1), t.end(1), t.group(1)))
        pos = t.end(0)
    return spans


def _forceinline_edits(code: str) -> list[Edit]:
    """__forceinline__ expands to `inline`; blank any other `inline` next to it, since a repeated
    `inline` is an error in C++."""
    return [
        Edit(a, b, " " * (b - a))
        for m in re.finditer(r"\b__forceinline__\b", code)
        for a, b, word in _specifiers_around(code, m.start(), m.end())
        if word in ("inline", "__inline__")
    ]


_CAST = re.compile(
    r"\b(?:reinterpret_cast|static_cast|const_cast)\s*<[^;]*?>\s*(?=\()|\(\s*(?:const\s+)?void\s*\*\s*\)"
)


def _func_attribute_edits(src: str, code: str) -> list[Edit]:
    """cudaFuncSetAttribute(k, ...) -> ::emu::func_set_attribute_named("k", k, ...), so that the
    attribute can be matched with the kernel's launches by name."""
    edits = []
    for m in re.finditer(r"\bcudaFuncSetAttribute\s*\(", code):
        paren = m.end() - 1
        close = _match_forward(code, paren)
        comma = _split_first_arg(code, paren + 1, close) if close > 0 else -1
        if comma < 0:
            continue
        first = code[paren + 1 : comma]
        key = canonical_name(re.sub(r"[&()]", " ", _CAST.sub(" ", first)))
        edits.append(Edit(m.start(), paren + 1, f'::emu::func_set_attribute_named("{key}", '))
    return edits


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.MULTILINE)


def apply_edits(src: str, edits: list[Edit]) -> str:
    out, pos = [], 0
    for e in sorted(edits):
        if e.start < pos:  # overlaps an earlier edit (e.g. `__shared__` inside an extern decl)
            continue
        out += [src[pos : e.start], e.text]
        pos = e.end
    out.append(src[pos:])
    return "".join(out)


def rewrite_source(src: str, where: str, include_edit=None) -> str:
    """Rewrites one file. `include_edit(quote, name)` returns a replacement for an #include
    target (e.g. the staged copy of a local header) or None to keep it."""
    code = blank_non_code(src)
    edits = _launch_edits(src, code, where) + _extern_shared_edits(src, code, where)
    edits += _static_shared_edits(code) + _forceinline_edits(code) + _noinline_edits(code)
    edits += _func_attribute_edits(src, code)
    if include_edit is not None:
        for m in _INCLUDE.finditer(src):
            if code[m.start() : m.end()].strip().startswith("#"):  # not inside a comment
                new = include_edit(m.group(1), m.group(2))
                if new is not None:
                    edits.append(Edit(m.start(1), m.end(), f'"{new}"'))
    return apply_edits(src, edits)


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
        shown = _display(self.path)
        if self.ok:
            plural = "" if self.kernels == 1 else "s"
            return f"emu: ok ({self.kernels} kernel{plural}) {shown}"
        return f"emu: FAILED {shown}: {self.reason}"


def _display(path: Path) -> str:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="CUDA programs (default: tests/cuda/*.cu)"
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="seconds per program (default 600)"
    )
    parser.add_argument(
        "--trace-dir", type=Path, default=None,
        help="also write the chapter-19 kernels' FlashInfer Trace set there (tools/emu_trace.py; "
             "default: no trace set)",
    )
    args = parser.parse_args(argv)
    files = args.files or sorted(DEFAULT_DIR.glob("*.cu"))
    if not files:
        print(f"emu: no *.cu programs in {_display(DEFAULT_DIR)}", file=sys.stderr)
        return 0
    results = [execute(f, timeout=args.timeout) for f in files]
    failed = [r for r in results if not r.ok]
    if len(results) > 1:
        if failed:
            names = ", ".join(_display(r.path) for r in failed)
            print(f"emu: {len(failed)} of {len(results)} programs FAILED: {names}", file=sys.stderr)
        else:
            print(f"emu: all {len(results)} programs ok", file=sys.stderr)
    traced = True
    if args.trace_dir is not None:
        import emu_trace  # needs torch, safetensors and flashinfer-bench: only for this flag

        traced = emu_trace.write_trace_set(args.trace_dir, files)
    return 1 if failed or not traced else 0


if __name__ == "__main__":
    sys.exit(main())
