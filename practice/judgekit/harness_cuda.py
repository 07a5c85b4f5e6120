"""Runs inside the sandbox for a CUDA exercise: each case is a self-checking CUDA program (host
main + the learner's kernels, included by file name) that the CPU emulator compiles and runs.

The emulator is tools/emu_kernels.py. The judge calls its `execute(path)` (a result with `.ok` and
`.compiled`) when it has one, else `run(path) -> bool`, where a compile failure must raise an
exception whose class is named CompileError. Either way a program that does not compile is CE.
The emulator must write only below the sandbox (its cache follows XDG_CACHE_HOME / TMPDIR).
"""

import importlib.util
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness_py import serve  # noqa: E402


class EmulatorMissing(Exception):
    judge_kind = "SE"


class CompileError(Exception):
    pass


def _load(job: dict):
    path = job["emulator"]
    try:
        sys.path.insert(0, os.path.dirname(path))
        spec = importlib.util.spec_from_file_location("emu_kernels", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["emu_kernels"] = module
        spec.loader.exec_module(module)
        if not callable(getattr(module, "execute", None)) and not callable(module.run):
            raise AttributeError("neither execute() nor run()")
    except BaseException as e:
        raise EmulatorMissing(f"CPU 模拟器 {path} 无法加载：{type(e).__name__}: {e}") from None
    return module


def _call(emulator, job: dict, i: int):
    path = os.path.abspath(job["cases"][i])
    execute = getattr(emulator, "execute", None)
    if callable(execute):
        result = execute(path)
        if not result.compiled:
            raise CompileError(f"{os.path.basename(path)} 编译失败（编译器的输出见下面的 stderr）")
        return {"passed": bool(result.ok)}
    return {"passed": bool(emulator.run(path))}


if __name__ == "__main__":
    serve(_load, _call)
