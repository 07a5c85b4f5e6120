"""Judging one submission: build the sandbox folder, run the supervisor, turn its report into verdicts.

The learner's code never runs in this process. This process builds the cases (inputs + expected
values from the exercise's tests/cases.py), starts sandbox.py (the supervisor) which runs the
learner's program under limits, then reads the program's outputs back as JSON + safetensors and
compares them itself.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import codec
from .compare import compare, describe
from .exercises import PRACTICE, Exercise

HERE = Path(__file__).resolve().parent
REPO = PRACTICE.parent
SANDBOX_UIDS = range(62000, 65000)  # per-run uids when judging as root (no passwd entries)
STARTUP_S = 60  # wall and CPU seconds for starting the program (importing torch, the solution)
MAX_READ = 4 << 20  # at most this much of any file the learner's program wrote is read back
SHOWN_OUTPUT = 2000  # characters of the program's stdout/stderr shown for a failing case
SHOWN_LINES, SHOWN_LINE_WIDTH = 30, 200
MAX_TIMEOUTS = 2  # after this many cases ran out of time, the rest are not run

VERDICTS = {
    "AC": "通过",
    "WA": "答案错误",
    "RE": "运行错误",
    "TLE": "超出时间限制",
    "MLE": "超出内存限制",
    "OLE": "输出超限",
    "CE": "编译错误",
    "SE": "评测机错误",
}

_uid_lock = threading.Lock()
_uid_counter = [0]


@dataclass
class CaseVerdict:
    index: int
    name: str
    visible: bool
    verdict: str
    message: str = ""
    cpu_s: float | None = None
    rss_mb: float | None = None
    details: dict = field(default_factory=dict)  # input / expected / actual / stdout / stderr / traceback

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class JudgeResult:
    exercise: Exercise
    cases: list[CaseVerdict]
    sandbox: dict
    elapsed_s: float
    message: str = ""  # a problem that concerns the whole run (e.g. compile error)

    @property
    def passed(self) -> int:
        return sum(c.verdict == "AC" for c in self.cases)

    @property
    def failed(self) -> int:
        return len(self.cases) - self.passed

    @property
    def ok(self) -> bool:
        return bool(self.cases) and self.failed == 0

    @property
    def first_failure(self) -> CaseVerdict | None:
        return next((c for c in self.cases if c.verdict != "AC"), None)

    def to_json(self) -> dict:
        return {
            "exercise": self.exercise.id,
            "cases": [c.to_json() for c in self.cases],
            "passed": self.passed,
            "failed": self.failed,
            "ok": self.ok,
            "first_failure": self.first_failure.index if self.first_failure else None,
            "sandbox": self.sandbox,
            "elapsed_s": round(self.elapsed_s, 3),
            "message": self.message,
        }


# ---- reading what the learner's program wrote --------------------------------------------------
def read_box_file(box: Path, name: str, limit: int = MAX_READ, start: int = 0) -> bytes | None:
    """Up to `limit` bytes of a regular file in the sandbox folder; None if missing or not a plain
    file (a symlink planted by the learner is never followed)."""
    try:
        fd = os.open(box / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.pread(fd, limit, max(start, 0))
    finally:
        os.close(fd)


def _segment(box: Path, name: str, start, end) -> str:
    if not isinstance(start, int) or start < 0:
        return ""
    length = SHOWN_OUTPUT * 4
    if isinstance(end, int) and end >= start:
        length = min(length, end - start)
    data = read_box_file(box, name, length, start) or b""
    text = data.decode("utf-8", errors="replace")
    cut = len(text) > SHOWN_OUTPUT or (isinstance(end, int) and end - start > len(data))
    lines = text[:SHOWN_OUTPUT].splitlines()
    cut = cut or len(lines) > SHOWN_LINES
    lines = [line if len(line) <= SHOWN_LINE_WIDTH else line[:SHOWN_LINE_WIDTH] + " ……"
             for line in lines[:SHOWN_LINES]]
    return "\n".join(lines) + ("\n……（输出过长，已截断）" if cut else "")


# ---- the sandbox's identity and view of the file system ----------------------------------------
def _uids_in_use() -> set[int]:
    used = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as f:
                    for line in f:
                        if line.startswith("Uid:"):
                            used.add(int(line.split()[1]))
                            break
            except OSError:
                pass
    return used


def _free_uid() -> int:
    with _uid_lock:
        _uid_counter[0] += 1
        offset = (os.getpid() * 97 + _uid_counter[0] * 13) % len(SANDBOX_UIDS)
    used = _uids_in_use()
    for k in range(len(SANDBOX_UIDS)):
        uid = SANDBOX_UIDS[(offset + k) % len(SANDBOX_UIDS)]
        if uid in used:
            continue
        try:
            pwd.getpwuid(uid)
            continue  # a real account: leave it alone
        except KeyError:
            return uid
    raise RuntimeError("no free sandbox uid")


def _tasks_of(uid: int) -> int:
    """Processes and threads owned by uid: what RLIMIT_NPROC counts."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as f:
                    text = f.read()
            except OSError:
                continue
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            if int(fields.get("Uid", "-1").split()[0]) == uid:
                count += int(fields.get("Threads", "1").strip())
    return count


def _python_dirs() -> list[str]:
    """Folders the learner's interpreter must read: its prefixes and package folders."""
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable))}
    dirs.update(v for k, v in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib",
                                                                    "purelib", "platlib"))
    dirs.update(p for p in sys.path if p.endswith(("site-packages", "dist-packages")))
    return sorted(d for d in dirs if d and os.path.isdir(d))


SYSTEM_READ_DIRS = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc",
                    "/proc", "/sys", "/dev", "/opt", "/nix"]


def _reachable_by_others(path: str) -> bool:
    """Can a uid with no special rights reach and read `path`?"""
    path = os.path.realpath(path)
    parts = Path(path).parents
    try:
        if any(not os.stat(p).st_mode & 0o001 for p in parts):
            return False
        return bool(os.stat(path).st_mode & 0o004)
    except OSError:
        return False


# ---- languages ---------------------------------------------------------------------------------
class PythonLanguage:
    harness = ["harness_py.py"]

    def read_dirs(self) -> list[str]:
        return []

    def prepare(self, ex: Exercise, cases: list, box: Path) -> dict:
        tensors: dict = {}
        encoded = [codec.encode(case.args, tensors, prefix=f"c{i}_") for i, case in enumerate(cases)]
        if tensors:
            codec.save_tensors(tensors, str(box / "inputs.safetensors"))
        return {"entry": ex.entry, "module_file": ex.file, "cases": encoded,
                "tensors": "inputs.safetensors" if tensors else None}

    def output(self, box: Path, index: int):
        """The value the program returned for case `index` (raises ValueError if unreadable)."""
        data = read_box_file(box, f"out-{index}.json")
        if data is None:
            raise ValueError("没有找到输出文件")
        tensors = {}
        blob = read_box_file(box, f"out-{index}.safetensors")
        if blob is not None:
            tensors = codec.load_tensors(blob)
        return codec.decode(json.loads(data), tensors)

    def check(self, case, actual) -> str | None:
        if case.raises:
            return f"应当抛出 {case.raises}，但函数正常返回了"
        return compare(case.expected, actual, case.atol, case.rtol)


CUDA_TEST_FILES = (".cu", ".cuh", ".h", ".hpp")


class CudaLanguage(PythonLanguage):
    """Each case is a self-checking CUDA program (tests/*.cu, including the learner's file by
    name), compiled and run by the CPU emulator tools/emu_kernels.py inside the sandbox."""

    harness = ["harness_cuda.py", "harness_py.py"]

    @staticmethod
    def emulator() -> Path:
        return Path(os.environ.get("MINISGL_EMU_KERNELS", REPO / "tools" / "emu_kernels.py"))

    def read_dirs(self) -> list[str]:
        return [str(self.emulator().resolve().parent)]

    def prepare(self, ex: Exercise, cases: list, box: Path) -> dict:
        emulator = self.emulator()
        if not emulator.is_file():
            raise FileNotFoundError(f"找不到 CPU 模拟器 {emulator}")
        tests = ex.dir / "tests"
        for path in tests.iterdir():  # drivers and the headers they include
            if path.suffix in CUDA_TEST_FILES and path.is_file() and path.name != ex.file:
                shutil.copyfile(path, box / path.name)
        names = []
        for case in cases:
            driver = ex.dir / case.args["driver"]
            if driver.parent != tests or driver.suffix != ".cu":
                raise ValueError(f"driver {driver} must be a .cu file directly in {tests}")
            names.append(driver.name)
        return {"emulator": str(emulator.resolve()), "cases": names}

    def check(self, case, actual) -> str | None:
        if isinstance(actual, dict) and actual.get("passed") is True:
            return None
        return "自检程序没有通过（见下面的程序输出）"


LANGUAGE_RUNNERS = {"python": PythonLanguage(), "cuda": CudaLanguage()}


# ---- verdicts ----------------------------------------------------------------------------------
def _is_memory_error(raw: dict) -> bool:
    types = raw.get("exc_types") or []
    message = str(raw.get("message", "")) + str(raw.get("traceback", ""))[-500:]
    return ("MemoryError" in types or raw.get("exc_errno") == 12
            or "can't allocate memory" in message or "not enough memory" in message
            or "std::bad_alloc" in message)


def _exception_verdict(raw: dict) -> tuple[str, str]:
    types = raw.get("exc_types") or []
    message = str(raw.get("message", ""))
    if _is_memory_error(raw):
        return "MLE", f"内存不够：{message}"
    if raw.get("exc_errno") == 27:  # EFBIG: a file (stdout included) hit RLIMIT_FSIZE
        return "OLE", "写出的内容超过了输出上限"
    if "CompileError" in types:
        return "CE", message
    if raw.get("exc_errno") == 11 and "BlockingIOError" in types:
        return "RE", f"{message}（进程/线程数达到上限，疑似 fork 炸弹）"
    return "RE", message


def _crash_verdict(raw: dict, stderr: str) -> tuple[str, str]:
    status = raw.get("status")
    if status == "tle":
        return "TLE", "CPU 时间用完" if raw.get("reason") == "cpu" else "运行太久没有结束"
    if status == "output_limit":
        return "OLE", "写出的内容超过了输出上限"
    if "MemoryError" in stderr or "std::bad_alloc" in stderr or "can't allocate memory" in stderr:
        return "MLE", "内存不够，进程崩溃"
    if status == "crashed":
        return "RE", f"进程异常终止（{raw.get('message') or raw.get('signal')}）"
    if status == "exited":
        return "RE", f"进程提前退出（退出码 {raw.get('exit_code')}）"
    return "RE", str(raw.get("message") or status)


def _startup_verdict(startup: dict) -> tuple[str, str]:
    status = startup.get("status")
    if status == "import_error":
        kind = startup.get("kind", "RE")
        if kind == "RE" and _is_memory_error(startup):
            kind = "MLE"
        detail = startup.get("traceback") or startup.get("message", "")
        return kind, str(detail)
    if status == "startup_tle":
        return "TLE", "加载你的代码超时（模块顶层的代码跑了太久？）"
    if status == "error":
        return "SE", str(startup.get("message"))
    verdict, message = _crash_verdict({**startup, "status": str(status).removeprefix("startup_")}, "")
    return verdict, "加载你的代码时" + message


def _verdict(lang, ex: Exercise, case, index: int, raw: dict, startup: dict, box: Path,
             time_limit: float) -> CaseVerdict:
    out = CaseVerdict(index=index, name=case.name, visible=case.visible, verdict="AC",
                      cpu_s=raw.get("cpu_s"), rss_mb=raw.get("rss_mb"))
    stdout = _segment(box, "stdout.txt", raw.get("out_start"), raw.get("out_end"))
    stderr = _segment(box, "stderr.txt", raw.get("err_start"), raw.get("err_end"))
    status = raw.get("status")
    if status == "skipped":
        out.verdict = "TLE"
        out.message = f"已有 {MAX_TIMEOUTS} 个用例超时，其余用例不再运行（按超时计）"
    elif status == "not_run":
        out.verdict, text = _startup_verdict(startup)
        lines = text.strip().splitlines()
        out.message = lines[-1] if lines else VERDICTS[out.verdict]
        if len(lines) > 1:
            out.details["traceback"] = text
    elif status == "ok":
        try:
            actual = lang.output(box, index)
        except Exception as e:
            out.verdict, out.message = "WA", f"读不出输出：{e}"
        else:
            problem = lang.check(case, actual)
            if problem:
                out.verdict, out.message = "WA", problem
                out.details["actual"] = describe(actual)
        if out.verdict == "AC" and isinstance(out.cpu_s, (int, float)) and out.cpu_s > time_limit:
            out.verdict = "TLE"
            out.message = f"用了 {out.cpu_s:.2f} s CPU 时间，限制 {time_limit:g} s"
    elif status == "exception":
        if case.raises and case.raises in (raw.get("exc_types") or []) and not _is_memory_error(raw):
            out.verdict = "AC"
        else:
            out.verdict, out.message = _exception_verdict(raw)
            out.details["actual"] = f"抛出了异常 {raw.get('message', '')}"
            if raw.get("traceback"):
                out.details["traceback"] = str(raw["traceback"])
    elif status == "bad_output":
        out.verdict, out.message = "WA", str(raw.get("message"))
    else:
        out.verdict, out.message = _crash_verdict(raw, stderr)
    if isinstance(raw.get("strays"), int) and raw["strays"] > 0:
        out.message += f"（之后清理了 {raw['strays']} 个残留进程）"
    stdout, stderr = stdout.replace(f"{box}/", ""), stderr.replace(f"{box}/", "")
    for key in ("traceback", "actual"):
        if key in out.details:
            out.details[key] = out.details[key].replace(f"{box}/", "")
    out.message = out.message.replace(f"{box}/", "")
    if out.verdict != "AC":
        if ex.language == "python":
            out.details["input"] = "\n".join(f"{k} = {describe(v)}" for k, v in case.args.items())
            out.details["expected"] = (f"抛出 {case.raises}" if case.raises
                                       else describe(case.expected))
        else:
            out.details["input"] = f"自检程序 {case.args.get('driver')}"
        if stdout:
            out.details["stdout"] = stdout
        if stderr:
            out.details["stderr"] = stderr
    return out


# ---- the run -----------------------------------------------------------------------------------
def _spawn_supervisor(spec_path: Path, timeout: float) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-B", str(HERE / "sandbox.py"), str(spec_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the supervisor kills the sandbox's tree, then exits
        try:
            output, _ = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            output, _ = proc.communicate()
    return proc.returncode, output.decode("utf-8", errors="replace")[-4000:]


def judge(ex: Exercise, source: str, *, time_limit_s: float | None = None,
          memory_mb: int | None = None, cases: list | None = None) -> JudgeResult:
    """Judge `source` (the text of the learner's file) on every case of `ex`."""
    began = time.monotonic()
    lang = LANGUAGE_RUNNERS[ex.language]
    cases = ex.load_cases() if cases is None else cases
    time_limit = float(time_limit_s or ex.time_limit_s)
    memory = int(memory_mb or ex.memory_mb)
    root = os.geteuid() == 0
    wrapper = Path(tempfile.mkdtemp(prefix="minisgl-judge-"))
    try:
        os.chmod(wrapper, 0o711)  # others may pass through to box/, but not list or change it
        box = wrapper / "box"
        box.mkdir(mode=0o700)
        (box / "tmp").mkdir()
        (box / ex.file).write_text(source, encoding="utf-8")
        for name in lang.harness:
            shutil.copyfile(HERE / name, box / name)
        shutil.copyfile(HERE / "codec.py", box / "judge_codec.py")
        try:
            job = lang.prepare(ex, cases, box)
        except (OSError, ValueError) as e:
            verdicts = [CaseVerdict(i, c.name, c.visible, "SE", str(e)) for i, c in enumerate(cases)]
            return JudgeResult(ex, verdicts, {}, time.monotonic() - began, str(e))
        job["case_cpu_s"] = time_limit
        (box / "job.json").write_text(json.dumps(job), encoding="utf-8")

        read_dirs = [d for d in SYSTEM_READ_DIRS if os.path.isdir(d)]
        read_dirs += _python_dirs() + lang.read_dirs()
        uid = _free_uid() if root else None
        keep_read_search = root and not all(_reachable_by_others(d) for d in _python_dirs())
        if uid is not None:
            for path in (box, box / "tmp"):
                os.chown(path, uid, uid)
        nproc = ex.max_processes if root else _tasks_of(os.getuid()) + ex.max_processes
        case_wall = max(3 * time_limit, time_limit + 2)
        env = {
            "PATH": f"{os.path.dirname(sys.executable)}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(box), "TMPDIR": str(box / "tmp"), "XDG_CACHE_HOME": str(box / "tmp"),
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
            "MALLOC_ARENA_MAX": "2",
        }
        spec = {
            "argv": [sys.executable, "-I", "-B", "-X", "utf8", "-X", "faulthandler", lang.harness[0]],
            "cwd": str(box), "env": env, "judge_pid": os.getpid(),
            "stdout": str(box / "stdout.txt"), "stderr": str(box / "stderr.txt"),
            "report": str(wrapper / "report.json"), "num_cases": len(cases),
            "startup_wall_s": STARTUP_S, "startup_cpu_s": STARTUP_S, "case_wall_s": case_wall,
            "cpu_total_s": int(STARTUP_S + len(cases) * (time_limit + 2)),
            "as_bytes": memory << 20, "fsize_bytes": ex.output_mb << 20, "nofile": 256,
            "nproc": nproc, "uid": uid, "keep_read_search": keep_read_search,
            "read_dirs": read_dirs, "landlock": True, "max_timeouts": MAX_TIMEOUTS,
        }
        spec_path = wrapper / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        overall = (STARTUP_S + case_wall + 5) * (len(cases) + 1)
        code, log = _spawn_supervisor(spec_path, overall)
        try:
            report = json.loads((wrapper / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            message = f"沙箱监督进程异常退出（{code}）：{log}"
            verdicts = [CaseVerdict(i, c.name, c.visible, "SE", message) for i, c in enumerate(cases)]
            return JudgeResult(ex, verdicts, {}, time.monotonic() - began, message)

        verdicts = [
            _verdict(lang, ex, case, i, raw, report["startup"], box, time_limit)
            for i, (case, raw) in enumerate(zip(cases, report["cases"]))
        ]
        sandbox = {
            "uid": uid, "read_search_capability": keep_read_search,
            "landlock_abi": report["landlock_abi"], "cpu_s": time_limit, "memory_mb": memory,
            "max_processes": ex.max_processes, "output_mb": ex.output_mb,
            "programs": report["programs"], "stray_killed": report["stray_killed"],
        }
        message = ""
        if report["startup"].get("status") != "ok" and verdicts:
            message = verdicts[0].message
        return JudgeResult(ex, verdicts, sandbox, time.monotonic() - began, message)
    finally:
        _remove(wrapper)


def _remove(folder: Path) -> None:
    """Delete the run's folder, even if the learner's program made parts of it unreadable."""
    try:
        shutil.rmtree(folder)
    except OSError:
        for path, dirs, _ in os.walk(folder):
            for d in dirs:
                try:
                    os.chmod(os.path.join(path, d), 0o700)
                except OSError:
                    pass
        shutil.rmtree(folder, ignore_errors=True)
