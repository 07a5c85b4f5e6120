"""Runs inside the sandbox for a CUDA exercise: builds each case's test program (host main, in
the read-only harness folder) linked with the learner's kernels, runs it on the CPU emulator
tools/emu_kernels.py, and hands back the data it wrote. The worker (see harness_py.py) runs this
code; the learner's code here is C++, which runs only in the built program, never in this
interpreter.

The built program holds learner code, which can run before main (a global constructor,
__attribute__((constructor))), inside the kernel, or after it (a destructor): it can print
anything, write the emulator's report file, pick its own exit status. So none of that is the
verdict. The program gets the case's input (drawn by the judge) on stdin and one more descriptor,
its number in argv[1], for the data it produces (e.g. the KV pool after the kernel); both are
unlinked files this process made, so no path of the sandbox names them. This process reads the
data back, at most the size the judge expects plus one byte, and returns it; the judge compares
it with bytes it computed itself, outside the sandbox. The exit status and the emulator's report
(out-of-bounds access, deadlock, ...) are returned too, but they can only fail a case, never pass
one: the runtime that writes the report is linked into the same program, so learner code can
silence it, and only the data check stands between such a program and AC.

The learner's file is never pasted into a test program's text. The exercise's tests/
learner_unit.cu (it includes the learner's file, then instantiates the kernel templates the test
programs launch) is compiled as a translation unit of its own, each test program as another, and
the two are linked, test program first. Before linking, the global symbols the learner's unit
defines are checked: only a symbol the test program needs from it, an inline copy of something
the test program defines too (the linker keeps the test program's), or a name of its own that no
test program, emulator runtime or C/C++ runtime library uses. So `#define main`, `#undef`, a
`#pragma`, a redefined helper or a replaced memcpy cannot change what the test program does.
The built program runs under one more Landlock layer: it may create and write files in TMPDIR
only (the emulator's report), never the build cache, the test programs or anything else.

A program that does not compile or link, or defines a forbidden symbol, is CE.
"""

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import linux  # noqa: E402
from harness_py import serve  # noqa: E402

LEARNER_UNIT = "learner_unit.cu"
_UNDEFINED = {"U", "w", "v"}
_WEAK = {"W", "V", "u"}  # inline functions, template instances: the first copy linked is kept
_RUNTIME_LIBS = ("libstdc++.so.6", "libc.so.6", "libm.so.6", "libgcc_s.so.1")


class EmulatorMissing(Exception):
    judge_kind = "SE"


class CompileError(Exception):
    pass


SHOWN_LOG = 1500  # characters of the compiler's output carried in a CompileError


def _with_log(what: str, log: str) -> str:
    """The message of a CompileError, with the compiler's own output in it: the output echoed
    to stderr is not enough (a failure before the compiler ran, such as a kernel launch the
    emulator cannot rewrite, echoes nothing, and a long stderr is cut). Its start holds the
    first error, which is the one to read. The judge escapes it before showing it."""
    log = (log or "").strip()
    if not log:
        return f"{what}（编译器没有输出）"
    cut = "\n……（编译器的输出过长，已截断）" if len(log) > SHOWN_LOG else ""
    return f"{what}，编译器的输出：\n{log[:SHOWN_LOG]}{cut}"


def _nm(path: Path, *flags: str) -> dict[str, str]:
    """Global symbols of an object or library: name -> nm's one-letter kind."""
    out = subprocess.run(["nm", "-P", "-g", *flags, str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        raise CompileError(f"nm {path.name} 失败：{out.stderr.strip()[:500]}")
    found = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            found[parts[0].split("@")[0]] = parts[1]
    return found


@functools.cache
def _library_symbols() -> frozenset:
    names: set[str] = set()
    for lib in _RUNTIME_LIBS:
        path = subprocess.run([os.environ.get("CXX", "g++"), f"-print-file-name={lib}"],
                              capture_output=True, text=True).stdout.strip()
        if os.path.isfile(path):
            names.update(_nm(Path(path), "-D", "--defined-only"))
    return frozenset(names)


def _demangle(name: str) -> str:
    out = subprocess.run(["c++filt", name], capture_output=True, text=True)
    return out.stdout.strip() or name


def forbidden_symbol(learner: Path, driver: Path, runtime: Path) -> str | None:
    """The first global symbol of the learner's object that could replace something of the test
    program, the emulator runtime or the C/C++ runtime libraries; None when there is none."""
    theirs = {**_nm(runtime), **_nm(driver)}
    defined = {n for n, kind in theirs.items() if kind not in _UNDEFINED}
    libs = _library_symbols()
    needed = {n for n, kind in _nm(driver).items() if kind in _UNDEFINED} - defined - libs
    for name, kind in _nm(learner).items():
        if kind in _UNDEFINED or name in needed:
            continue
        if kind in _WEAK and name in defined:
            continue
        if name not in theirs and name not in libs:
            continue
        return name
    return None


def _echo(log: str) -> None:
    if log:
        sys.stderr.write(log)
        sys.stderr.flush()


def _load(setup: dict):
    path = setup["emulator"]
    try:
        sys.path.insert(0, os.path.dirname(path))
        import importlib.util

        spec = importlib.util.spec_from_file_location("emu_kernels", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["emu_kernels"] = module
        spec.loader.exec_module(module)
        for name in ("compile_unit", "link", "execute_binary", "build_runtime", "cache_root"):
            if not callable(getattr(module, name, None)):
                raise AttributeError(f"no {name}()")
    except BaseException as e:
        raise EmulatorMissing(f"CPU 模拟器 {path} 无法加载：{type(e).__name__}: {e}") from None
    # The build cache lives outside TMPDIR: the built programs may write TMPDIR, never the cache.
    os.environ["MINISGL_CACHE_DIR"] = os.path.join(os.getcwd(), "cache")
    unit = Path(setup["unit"]).read_text(encoding="utf-8")
    return module, unit


def _restrict_program() -> None:
    """In the built program's child, before exec: write only below TMPDIR (and /dev/null)."""
    abi = linux.landlock_abi()
    if abi:
        linux.restrict_filesystem(abi, ["/"], [tempfile.gettempdir()], ["/dev/null"])


def _call(target, header: dict, payloads: list[bytes]):
    emulator, unit_text = target
    driver = Path(header["driver"])
    unit = Path(os.getcwd()) / f"_judge_{LEARNER_UNIT}"
    unit.write_text(unit_text, encoding="utf-8")
    learner_obj, log = emulator.compile_unit(unit, echo=False)
    if learner_obj is None:
        raise CompileError(_with_log("你的代码编译失败", log))
    _echo(log)  # warnings of a unit that compiled
    driver_obj, log = emulator.compile_unit(driver, echo=True)
    runtime, _ = emulator.build_runtime(True)
    if driver_obj is None or runtime is None:
        raise EmulatorMissing(f"测试程序 {driver.name} 编译失败：{log[-2000:]}")
    bad = forbidden_symbol(learner_obj, driver_obj, runtime)
    if bad is not None:
        raise CompileError(f"你的代码定义了全局符号 {_demangle(bad)}，它属于测试程序、模拟器或 C/C++ "
                           "运行库；换个名字，或者把它声明为 static")
    binary, log = emulator.link([driver_obj, learner_obj], driver.stem, echo=False)
    if binary is None:
        raise CompileError(_with_log(f"{driver.name} 链接失败", log))
    _echo(log)
    with tempfile.TemporaryFile() as case_input, tempfile.TemporaryFile() as data:
        case_input.write(payloads[0])
        case_input.flush()
        case_input.seek(0)
        result = emulator.execute_binary(binary, driver, echo=True, preexec=_restrict_program,
                                         args=(str(data.fileno()),), stdin=case_input.fileno(),
                                         pass_fds=(data.fileno(),))
        size = os.fstat(data.fileno()).st_size
        output = os.pread(data.fileno(), int(header["output_bytes"]) + 1, 0)
    return {"output": output, "output_size": size, "exit_code": result.returncode,
            "emu_errors": result.emu_errors, "emu_report": result.reported}


if __name__ == "__main__":
    serve(_load, _call)
