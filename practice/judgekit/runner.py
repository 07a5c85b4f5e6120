"""Judging one submission: build the sandbox folder, run the supervisor, turn its report into verdicts.

The learner's code never runs in this process. This process builds the cases (inputs + expected
values from the exercise's tests/cases.py), starts sandbox.py (the supervisor) which runs the
learner's program under limits, then reads the program's outputs back as JSON + safetensors and
compares them itself.

The run folder (a fresh temp dir, owned by the judge's user, mode 0711) holds
    box/         the only folder the sandbox may write: the learner's file, tmp/ (HOME, TMPDIR)
    harness/     the harness scripts the sandbox runs, and (CUDA) the test programs: read-only
    job.bin      the cases' inputs; the harness gets it as an open descriptor, never by path
    stdout.txt, stderr.txt, results/, report.json: written by the supervisor only
The run's control groups (cgroup.py: CPU time and memory of every process of the sandbox) are
made before the supervisor starts and removed, with everything still in them, after it ended.

Only sample cases (visible=True) show their input, expected output, the program's output, its
CPU time and its memory peak; a hidden case shows its verdict and a fixed reason written by the
judge: no time, no memory figure, no exception name, nothing learner-controlled, so that nothing
about its data can be harvested from the verdict page (a program could encode a hidden input in
how long it runs or which exception it raises). Everything shown that a program produced is
escaped (text.py: no terminal escape sequence or bidi override reaches a terminal or the page).
Comparing the program's value with the expected one is learner data too: any exception there (an
int too large for a float, a value nested too deep) is a WA with a message, never a crash.
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

from . import cgroup, codec, frames
from .compare import compare, compare_bytes, describe
from .exercises import PRACTICE, Exercise
from .text import safe_text

HERE = Path(__file__).resolve().parent
REPO = PRACTICE.parent
SANDBOX_UIDS = range(62000, 65000)  # per-run uids when judging as root (no passwd entries)
STARTUP_S = 60  # wall and CPU seconds for starting the program (importing torch, the solution)
MAX_READ = 32 << 20  # at most this much of a case's output is read back
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
    """Up to `limit` bytes of a regular file in `box`; None if missing or not a plain file (a
    symlink is never followed, a FIFO never blocks). The judge reads only files the supervisor
    wrote, but opens them as if the learner could have planted anything there."""
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


def _segment(folder: Path, name: str, start, end) -> str:
    if not isinstance(start, int) or start < 0:
        return ""
    length = SHOWN_OUTPUT * 4
    if isinstance(end, int) and end >= start:
        length = min(length, end - start)
    data = read_box_file(folder, name, length, start) or b""
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


SYSTEM_READ_DIRS = ["/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/proc", "/sys",
                    "/dev", "/opt", "/nix"]
# From /etc only what the dynamic loader, the C library and the compiler read; not /etc wholesale.
ETC_READ_FILES = ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
                  "/etc/nsswitch.conf", "/etc/passwd", "/etc/group", "/etc/alternatives"]


# ---- languages ---------------------------------------------------------------------------------
class PythonLanguage:
    harness = ["harness_py.py"]

    def read_dirs(self) -> list[str]:
        return []

    def prepare(self, ex: Exercise, cases: list, readonly: Path) -> list[tuple[dict, list[bytes]]]:
        """The job: a setup message, then one message per case (tagged JSON + safetensors)."""
        messages: list[tuple[dict, list[bytes]]] = [({"entry": ex.entry, "module_file": ex.file},
                                                     [])]
        for case in cases:
            tensors: dict = {}
            data = json.dumps(codec.encode(case.args, tensors, prefix="c")).encode()
            messages.append(({}, [data, codec.dump_tensors(tensors) if tensors else b""]))
        return messages

    def output(self, results: Path, index: int):
        """The value the program returned for case `index` (raises ValueError if unreadable)."""
        data = read_box_file(results, f"out-{index}.json")
        if data is None:
            raise ValueError("没有找到输出文件")
        tensors = {}
        blob = read_box_file(results, f"out-{index}.safetensors")
        if blob is not None:
            tensors = codec.load_tensors(blob)
        return codec.decode(json.loads(data), tensors)

    def check(self, case, actual) -> str | None:
        if case.raises:
            return f"应当抛出 {case.raises}，但函数正常返回了"
        return compare(case.expected, actual, case.atol, case.rtol)

    def shown(self, actual) -> str:
        """The program's output, as a failing sample case shows it."""
        return describe(actual)


CUDA_TEST_FILES = (".cu", ".cuh", ".h", ".hpp")


class CudaLanguage(PythonLanguage):
    """Each case runs a test program (a host main in tests/*.cu, named by Case.args["driver"])
    linked with the learner's file compiled on its own (tests/learner_unit.cu), on the CPU
    emulator tools/emu_kernels.py inside the sandbox (see harness_cuda.py). The program gets the
    case's input bytes (Case.args["input"], drawn by tests/cases.py) on stdin and writes its data
    to a descriptor it is given; the case passes only if those bytes are exactly Case.expected,
    which this process computed. The program holds learner code, so what it prints, its exit
    status and the emulator's report can fail a case but never pass one. The test programs are
    copied into the read-only harness folder, so that nothing the learner's code does can change
    them."""

    harness = ["harness_cuda.py", "harness_py.py", "linux.py"]

    @staticmethod
    def emulator() -> Path:
        return Path(os.environ.get("MINISGL_EMU_KERNELS", REPO / "tools" / "emu_kernels.py"))

    def read_dirs(self) -> list[str]:
        return [str(self.emulator().resolve().parent)]

    def prepare(self, ex: Exercise, cases: list, readonly: Path) -> list[tuple[dict, list[bytes]]]:
        emulator = self.emulator()
        if not emulator.is_file():
            raise FileNotFoundError(f"找不到 CPU 模拟器 {emulator}")
        tests = ex.dir / "tests"
        for path in tests.iterdir():  # drivers and the headers they include
            if path.suffix in CUDA_TEST_FILES and path.is_file() and path.name != ex.file:
                shutil.copyfile(path, readonly / path.name)
        unit = readonly / "learner_unit.cu"
        if not unit.is_file():
            raise FileNotFoundError(f"{tests} 里没有 learner_unit.cu（学习者代码的编译单元）")
        messages: list[tuple[dict, list[bytes]]] = [
            ({"emulator": str(emulator.resolve()), "unit": str(unit)}, [])]
        for case in cases:
            driver = ex.dir / case.args["driver"]
            if driver.parent != tests or driver.suffix != ".cu":
                raise ValueError(f"driver {driver} must be a .cu file directly in {tests}")
            data = case.args.get("input")
            if not isinstance(data, bytes) or not isinstance(case.expected, bytes):
                raise ValueError(f"用例 {case.name}：args['input'] 和 expected 都应是 bytes")
            messages.append(({"driver": str(readonly / driver.name),
                              "output_bytes": len(case.expected)}, [data, b""]))
        return messages

    def check(self, case, actual) -> str | None:
        if not isinstance(actual, dict):
            return "测试程序没有交回数据"
        size, want = actual.get("output_size"), len(case.expected)
        problem = compare_bytes(case.expected, actual.get("output"), case.regions)
        if problem and isinstance(size, int) and size != want:
            problem = f"测试程序写回了 {size} 字节的数据，应当是 {want} 字节（程序没有正常跑完？）"
        problems = []  # what went wrong while it ran first: it explains the data
        if actual.get("emu_errors") != 0:
            problems.append("模拟器报告了错误（越界读写、死锁等，见 stderr 里 emu: error 开头的行）")
        elif actual.get("emu_report") is not True:
            problems.append("程序结束时没有留下模拟器的报告（提前退出了？）")
        code = actual.get("exit_code")
        if code != 0:
            problems.append(f"程序被信号 {-code} 终止" if isinstance(code, int) and code < 0
                            else f"程序的退出码是 {code}")
        return "\n".join(problems + ([problem] if problem else [])) or None

    def shown(self, actual) -> str:
        if not isinstance(actual, dict):
            return describe(actual)
        return (f"写回 {actual.get('output_size')} 字节的数据，退出码 {actual.get('exit_code')}，"
                f"模拟器报告了 {actual.get('emu_errors')} 个错误")


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
    if any(str(t).rsplit(".", 1)[-1] == "CompileError" for t in types):
        return "CE", message
    if raw.get("exc_errno") == 11 and "BlockingIOError" in types:
        return "RE", f"{message}（进程/线程数达到上限，疑似 fork 炸弹）"
    return "RE", message


def _memory_message(raw: dict) -> str:
    text = "所有进程合计的内存超过了限制"
    if isinstance(raw.get("limit_mb"), int):
        text = f"所有进程合计的内存超过了 {raw['limit_mb']} MB 的限制"
    if isinstance(raw.get("rss_mb"), (int, float)):
        text += f"（峰值 {raw['rss_mb']:g} MB）"
    return text + "，内核终止了其中的进程"


def _crash_verdict(raw: dict, stderr: str) -> tuple[str, str]:
    status = raw.get("status")
    if status == "mle":
        return "MLE", _memory_message(raw)
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


HIDDEN_REASONS = {
    "WA": "输出与期望不符",
    "RE": "运行出错",
    "TLE": "超出时间限制",
    "MLE": "超出内存限制",
    "OLE": "输出超限",
    "CE": "编译错误",
    "SE": "评测机错误",
}


def _hidden_reason(out: CaseVerdict, raw: dict) -> str:
    """What a hidden case may say: the verdict's reason in the judge's fixed words. Not even a
    built-in exception's name: which exception a program raises is a choice it can make from
    the case's data."""
    reason = "隐藏用例：" + HIDDEN_REASONS.get(out.verdict, VERDICTS[out.verdict])
    if out.verdict == "TLE" and raw.get("status") == "skipped":
        reason += "（前面的用例超时，未运行）"
    return reason


def check_value(lang, case, actual) -> tuple[str | None, str]:
    """(what is wrong or None, the value as a failing sample case shows it). The value is the
    learner's: comparing or describing it may raise anything (an int too large for a float, a
    structure nested too deep for repr), and that is the learner's wrong answer, never an
    exception in the judge."""
    try:
        problem = lang.check(case, actual)
    except Exception as e:  # noqa: BLE001 - whatever the data makes the comparison raise
        return f"返回值无法和期望的值比较（{type(e).__name__}）", ""
    if not problem:
        return None, ""
    try:
        shown = lang.shown(actual)
    except Exception as e:  # noqa: BLE001
        shown = f"（无法显示这个值：{type(e).__name__}）"
    return str(problem), shown


def _output_verdict(lang, case, results: Path, index: int) -> tuple[str | None, str]:
    try:
        actual = lang.output(results, index)
    except Exception as e:  # noqa: BLE001 - malformed, too deep, too big: the learner's output
        return f"读不出输出：{type(e).__name__}: {str(e)[:300]}", ""
    return check_value(lang, case, actual)


def _verdict(lang, ex: Exercise, case, index: int, raw: dict, startup: dict, run: Path,
             time_limit: float) -> CaseVerdict:
    """The case's verdict, everything shown escaped; a bug met on the way is SE for this case,
    not a crash of the judge."""
    try:
        out = _raw_verdict(lang, ex, case, index, raw, startup, run, time_limit)
    except Exception as e:  # noqa: BLE001
        out = CaseVerdict(index=index, name=case.name, visible=case.visible, verdict="SE",
                          message=f"评测机处理这个用例时出错：{type(e).__name__}")
    if not case.visible:  # neither time nor memory: both can carry a hidden case's data
        out.cpu_s = out.rss_mb = None
    out.message = safe_text(out.message)
    out.details = {key: safe_text(value) for key, value in out.details.items()}
    return out


def _raw_verdict(lang, ex: Exercise, case, index: int, raw: dict, startup: dict, run: Path,
                 time_limit: float) -> CaseVerdict:
    out = CaseVerdict(index=index, name=case.name, visible=case.visible, verdict="AC",
                      cpu_s=raw.get("cpu_s"), rss_mb=raw.get("rss_mb"))
    stdout = _segment(run, "stdout.txt", raw.get("out_start"), raw.get("out_end"))
    stderr = _segment(run, "stderr.txt", raw.get("err_start"), raw.get("err_end"))
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
        problem, shown = _output_verdict(lang, case, run / "results", index)
        if problem:
            out.verdict, out.message = "WA", problem
            if shown:
                out.details["actual"] = shown
    elif status == "exception":
        if case.raises and case.raises in (raw.get("exc_types") or []) and not _is_memory_error(raw):
            out.verdict = "AC"
        else:
            out.verdict, out.message = _exception_verdict(raw)
            if out.verdict != "CE":  # a compile error's message is the compiler's output
                out.details["actual"] = f"抛出了异常 {raw.get('message', '')}"
                if raw.get("traceback"):
                    out.details["traceback"] = str(raw["traceback"])
    elif status == "bad_output":
        out.verdict, out.message = "WA", str(raw.get("message"))
    else:
        out.verdict, out.message = _crash_verdict(raw, stderr)
    if out.verdict in ("AC", "WA", "RE") and isinstance(out.cpu_s, (int, float)) \
            and out.cpu_s > time_limit:
        out.verdict = "TLE"  # measured by the supervisor, over the whole process tree
        out.message = f"用了 {out.cpu_s:.2f} s CPU 时间，限制 {time_limit:g} s"
        out.details = {}
    if isinstance(raw.get("strays"), int) and raw["strays"] > 0:
        out.message += f"（之后清理了 {raw['strays']} 个残留进程）"
    if out.verdict == "AC":
        out.message, out.details = "", {}
        return out
    if not case.visible and status != "not_run":
        out.message, out.details = _hidden_reason(out, raw), {}
        return out
    def short(text: str) -> str:
        return text.replace(f"{run / 'box'}/", "").replace(f"{run / 'harness'}/", "")

    stdout, stderr = short(stdout), short(stderr)
    for key in ("traceback", "actual"):
        if key in out.details:
            out.details[key] = short(out.details[key])
    out.message = short(out.message)
    if case.visible:
        if ex.language == "python":
            out.details["input"] = "\n".join(f"{k} = {describe(v)}" for k, v in case.args.items())
            out.details["expected"] = (f"抛出 {case.raises}" if case.raises
                                       else describe(case.expected))
        else:
            out.details["input"] = str(case.args.get("about") or case.args.get("driver"))
        if stdout:
            out.details["stdout"] = stdout
        if stderr:
            out.details["stderr"] = stderr
    return out


# ---- the run -----------------------------------------------------------------------------------
_active: dict[int, subprocess.Popen] = {}  # supervisors running now, by pid
_runs: dict[Path, cgroup.RunGroups] = {}  # run folders not yet removed, and their groups
_active_lock = threading.Lock()


def _stop(proc: subprocess.Popen) -> None:
    """Ask a supervisor to kill its sandbox's tree and exit; kill it if it does not."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def stop_all() -> None:
    """Stop every supervisor this process started and remove every run folder (for a server
    going down: the threads that judge are daemons and will not reach their own clean-up)."""
    with _active_lock:
        running, folders = list(_active.values()), list(_runs.items())
    for proc in running:
        _stop(proc)
    for folder, groups in folders:
        cgroup.remove(groups)
        _remove(folder)


def _spawn_supervisor(spec_path: Path, timeout: float) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-B", str(HERE / "sandbox.py"), str(spec_path)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    with _active_lock:
        _active[proc.pid] = proc
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        output, _ = proc.communicate()
    except BaseException:  # Ctrl+C, SIGTERM turned into SystemExit: leave nothing running
        _stop(proc)
        raise
    finally:
        with _active_lock:
            _active.pop(proc.pid, None)
    return proc.returncode, output.decode("utf-8", errors="replace")[-4000:]


def _write_job(path: Path, messages: list[tuple[dict, list[bytes]]]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as f:
        for header, payloads in messages:
            f.write(frames.pack(header, *payloads))


def _read_dirs(lang, harness: Path) -> list[str]:
    found = [d for d in SYSTEM_READ_DIRS + ETC_READ_FILES if os.path.exists(d)]
    return found + _python_dirs() + lang.read_dirs() + [str(harness)]


def judge(ex: Exercise, source: str, *, time_limit_s: float | None = None,
          memory_mb: int | None = None, cases: list | None = None) -> JudgeResult:
    """Judge `source` (the text of the learner's file) on every case of `ex`."""
    began = time.monotonic()
    lang = LANGUAGE_RUNNERS[ex.language]
    cases = ex.load_cases() if cases is None else cases
    # Sample cases run first: output a program leaves behind late (a thread, a child) can then
    # only land in a hidden case's output, which is never shown.
    order = sorted(range(len(cases)), key=lambda i: not cases[i].visible)
    result = _judge_in_order(ex, lang, source, [cases[i] for i in order], time_limit_s,
                             memory_mb, began)
    back = [0] * len(order)
    for position, i in enumerate(order):
        back[i] = result.cases[position]
        back[i].index = i
    result.cases = back
    return result


def _judge_in_order(ex: Exercise, lang, source: str, cases: list, time_limit_s: float | None,
                    memory_mb: int | None, began: float) -> JudgeResult:
    time_limit = float(time_limit_s or ex.time_limit_s)
    memory = int(memory_mb or ex.memory_mb)
    root = os.geteuid() == 0
    run = Path(tempfile.mkdtemp(prefix="minisgl-judge-"))
    groups = cgroup.RunGroups(memory_bytes=memory << 20, note="not made yet")
    with _active_lock:
        _runs[run] = groups
    try:
        os.chmod(run, 0o711)  # the sandbox may pass through to box/ and harness/, nothing more
        box, harness, results = run / "box", run / "harness", run / "results"
        box.mkdir(mode=0o700)
        (box / "tmp").mkdir()
        (box / ex.file).write_text(source, encoding="utf-8")
        harness.mkdir(mode=0o755)
        results.mkdir(mode=0o700)
        for name in [*lang.harness, "frames.py"]:
            shutil.copyfile(HERE / name, harness / name)
        shutil.copyfile(HERE / "codec.py", harness / "judge_codec.py")
        try:
            _write_job(run / "job.bin", lang.prepare(ex, cases, harness))
        except (OSError, ValueError) as e:
            verdicts = [CaseVerdict(i, c.name, c.visible, "SE", str(e)) for i, c in enumerate(cases)]
            return JudgeResult(ex, verdicts, {}, time.monotonic() - began, str(e))
        for path in harness.iterdir():
            os.chmod(path, 0o644)

        uid = _free_uid() if root else None
        if uid is not None:
            for path in (box, box / "tmp", box / ex.file):
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
            "argv": [sys.executable, "-I", "-B", "-X", "utf8", "-X", "faulthandler",
                     str(harness / lang.harness[0])],
            "cwd": str(box), "env": env, "judge_pid": os.getpid(),
            "stdout": str(run / "stdout.txt"), "stderr": str(run / "stderr.txt"),
            "job": str(run / "job.bin"), "results": str(results),
            "report": str(run / "report.json"), "num_cases": len(cases),
            "startup_wall_s": STARTUP_S, "startup_cpu_s": STARTUP_S, "case_wall_s": case_wall,
            "case_cpu_s": time_limit, "cpu_total_s": int(STARTUP_S + len(cases) * (time_limit + 2)),
            "as_bytes": memory << 20, "fsize_bytes": ex.output_mb << 20, "nofile": 256,
            "nproc": nproc, "uid": uid, "read_dirs": _read_dirs(lang, harness), "landlock": True,
            "max_timeouts": MAX_TIMEOUTS,
        }
        groups = cgroup.create(memory << 20)
        with _active_lock:
            _runs[run] = groups
        spec["cgroups"] = groups.to_json()
        spec_path = run / "spec.json"
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        overall = (STARTUP_S + case_wall + 5) * (len(cases) + 1)
        code, log = _spawn_supervisor(spec_path, overall)
        try:
            report = json.loads((run / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            message = safe_text(f"沙箱监督进程异常退出（{code}）：{log}")
            verdicts = [CaseVerdict(i, c.name, c.visible, "SE", message) for i, c in enumerate(cases)]
            return JudgeResult(ex, verdicts, {}, time.monotonic() - began, message)

        verdicts = [
            _verdict(lang, ex, case, i, raw, report["startup"], run, time_limit)
            for i, (case, raw) in enumerate(zip(cases, report["cases"]))
        ]
        sandbox = {
            "uid": uid, "namespaces": uid is not None,
            "landlock_abi": report["landlock_abi"], "cpu_s": time_limit, "memory_mb": memory,
            "wall_s": case_wall, "max_processes": ex.max_processes, "output_mb": ex.output_mb,
            "programs": report["programs"], "stray_killed": report["stray_killed"],
            "cpu_accounting": report.get("cpu_accounting", "proc"),
            "memory_accounting": report.get("memory_accounting", "rlimit_as"),
            "cgroup_note": groups.note,
        }
        message = ""
        if report["startup"].get("status") != "ok" and verdicts:
            message = verdicts[0].message
        return JudgeResult(ex, verdicts, sandbox, time.monotonic() - began, message)
    finally:
        cgroup.remove(groups)  # kills whatever is still inside, even if the supervisor died
        _remove(run)
        with _active_lock:
            _runs.pop(run, None)


def _remove(folder: Path) -> None:
    """Delete the run's folder, whatever the learner's program left in it; never raises.

    The program may leave any tree the sandbox let it make: a chain of folders thousands deep
    (shutil.rmtree recurses once per level and dies of RecursionError; its paths outgrow
    PATH_MAX), 10^5 files, symlink loops, FIFOs, folders without any permission. So the folder
    is flattened instead of walked: each folder met is emptied by moving its subfolders up into
    the run folder and unlinking everything else, then removed. No recursion, no path longer than
    one name, two descriptors open at a time, nothing followed. Nothing runs in the sandbox any
    more when this is called (the supervisor and the groups killed it all), so nothing moves
    while it works."""
    try:
        _flatten_and_remove(folder)
    except Exception:  # noqa: BLE001 - still try the slow way below; never crash the judge
        pass
    if os.path.lexists(folder):
        try:
            shutil.rmtree(folder, ignore_errors=True)
        except Exception:  # noqa: BLE001 - RecursionError is not an OSError
            pass


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_dir(name: str, dir_fd: int) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except PermissionError:  # a folder the program made unreadable (matters when not root)
        os.chmod(name, 0o700, dir_fd=dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _entries(fd: int) -> list[tuple[str, bool]]:
    """(name, is a real folder) of every entry; a symlink to a folder is not a folder."""
    with os.scandir(fd) as it:
        return [(e.name, e.is_dir(follow_symlinks=False)) for e in it]


def _flatten_and_remove(folder: Path) -> None:
    top = os.open(folder, _DIR_FLAGS)
    moved = 0
    try:
        os.fchmod(top, 0o700)
        while True:
            entries = _entries(top)
            if not entries:
                break
            for name, is_dir in entries:
                if not is_dir:
                    os.unlink(name, dir_fd=top)
                    continue
                fd = _open_dir(name, top)
                try:
                    os.fchmod(fd, 0o700)  # so that its entries can be unlinked and moved
                    for child, child_is_dir in _entries(fd):
                        if not child_is_dir:
                            os.unlink(child, dir_fd=fd)
                            continue
                        while True:  # a name free in the run folder (nothing else writes there)
                            moved += 1
                            new = f".judge-rm-{moved}"
                            try:
                                os.lstat(new, dir_fd=top)
                            except FileNotFoundError:
                                break
                        os.rename(child, new, src_dir_fd=fd, dst_dir_fd=top)
                finally:
                    os.close(fd)
                os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(folder)
