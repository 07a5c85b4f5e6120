"""Hostile submissions against the judge's limits, its verdict logic and what it shows (issue 28).

One group per defect, each with the attack as first found and variants of the same boundary:
A  CPU time burnt where the process tree does not see it (children the kernel reaps) is TLE;
B  values the comparison cannot digest (10 ** 400, NaN, infinities, deep nesting) are WA;
C  any tree the program leaves in its folder is removed, the judge survives it;
G  the memory of all the program's processes together is limited (MLE, with the peak);
H  hidden cases show no time, no memory figure and no exception name;
I  no control character a program prints reaches the terminal or the page;
J  a CUDA compile error shows the compiler's output.
The cgroup tests skip, saying why, only where no control group can be made (not root, no writable
hierarchy); as root on a machine with cgroups (this one, CI) they run. Memory tests use a 256 MB
limit: the CI machine is small.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRACTICE = ROOT / "practice"
sys.path.insert(0, str(PRACTICE))

from judgekit import cgroup  # noqa: E402
from judgekit.exercises import find_exercise, list_exercises  # noqa: E402
from judgekit.report import format_result  # noqa: E402
from judgekit.runner import LANGUAGE_RUNNERS, check_value, judge  # noqa: E402

EX101, EX1101, EX1901 = find_exercise(101), find_exercise(1101), find_exercise(1901)
CASES101 = EX101.load_cases()
SAMPLE101 = [c for c in CASES101 if c.visible and not c.raises]
REFERENCE_101 = EX101.reference_path.read_text()
REFERENCE_1101 = EX1101.reference_path.read_text()
REFERENCE_1901 = EX1901.reference_path.read_text()
JUDGE = [sys.executable, str(PRACTICE / "judge.py")]

_PROBE = cgroup.create(64 << 20)
cgroup.remove(_PROBE)
NEEDS_CPU_GROUP = pytest.mark.skipif(
    _PROBE.cpu is None, reason=f"no control group for CPU time on this machine: {_PROBE.note}")
NEEDS_MEMORY_GROUP = pytest.mark.skipif(
    _PROBE.memory is None, reason=f"no control group for memory on this machine: {_PROBE.note}")
OUR_GROUPS = f"{cgroup.PREFIX}{os.getpid()}-"


def _verdicts(result) -> list[str]:
    return [c.verdict for c in result.cases]


def _solution_101(body: str, prelude: str = "") -> str:
    """A 101 solution: module-level `prelude`, then `body` run first in the function (its
    arguments: config, budget_bytes, page_size, request_len), then the right answer."""
    reference = REFERENCE_101.replace("def kv_cache_budget(", "def reference(")
    return (reference + "\n" + textwrap.dedent(prelude) + "\n\ndef kv_cache_budget(config, "
            "budget_bytes, page_size, request_len):\n"
            + textwrap.indent(textwrap.dedent(body), "    ")
            + "\n    return reference(config, budget_bytes, page_size, request_len)\n")


@pytest.fixture
def scratch(monkeypatch):
    """A temp folder the judge makes its run folder in (reachable by the sandbox uid); it must
    be empty after the judge returned."""
    folder = Path(tempfile.mkdtemp(prefix="judge-hostile-"))
    folder.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


@pytest.fixture(autouse=True)
def no_group_left(monkeypatch, tmp_path):
    monkeypatch.setenv("MINISGL_PRACTICE_WORKSPACE", str(tmp_path / "workspace"))
    yield
    assert [g for g in cgroup.leftovers() if OUR_GROUPS in g] == []


# ---- A. CPU time is the whole sandbox's, counted by the kernel ----------------------------------
BURN_PRELUDE = """
import ctypes, os, signal, sys, threading, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def wait(pid):
    try:
        os.waitpid(pid, 0)  # with SIGCHLD ignored: waits for the child, then ECHILD
    except ChildProcessError:
        pass

def side_by_side(work, n=2):
    # n processes running work() at once (the machine's two cores), so that 1.6 s of CPU
    # fits in the wall-clock limit: only the CPU accounting can catch it
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            work()
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        wait(pid)

def short_children(count, child):
    # `count` children one after another, each running child() for a moment and exiting
    def work():
        for _ in range(count):
            pid = os.fork()
            if pid == 0:
                child()
                os._exit(0)
            wait(pid)
    return work
"""
BURNERS = {
    # The attack as found: SIGCHLD ignored, so every child is reaped by the kernel the moment it
    # exits and its CPU time reaches no parent's cutime; none lives long enough to be seen in /proc.
    "sigchld-ignored": """
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        side_by_side(short_children(40, lambda: burn(0.02)))
    """,
    # The same through sigaction's SA_NOCLDWAIT flag (handler left at SIG_DFL), set with ctypes.
    "sa-nocldwait": """
        class Sigaction(ctypes.Structure):  # glibc's struct sigaction (x86_64 and aarch64)
            _fields_ = [("handler", ctypes.c_void_p), ("mask", ctypes.c_ulong * 16),
                        ("flags", ctypes.c_int), ("restorer", ctypes.c_void_p)]
        libc = ctypes.CDLL(None, use_errno=True)
        action = Sigaction(None, (ctypes.c_ulong * 16)(), 2, None)  # SA_NOCLDWAIT
        assert libc.sigaction(int(signal.SIGCHLD), ctypes.byref(action), None) == 0
        side_by_side(short_children(40, lambda: burn(0.02)))
    """,
    # Fresh interpreters started with posix_spawn (exec), each burning a little, never reaped.
    "spawned-interpreters": """
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        loop = "import time\\nend = time.process_time() + 0.1\\nwhile time.process_time() < end: pass"
        def spawn_some():
            for _ in range(8):
                wait(os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-c", loop],
                                    dict(os.environ)))
        side_by_side(spawn_some)
    """,
    # Short-lived children that burn in four threads each, then exit unseen.
    "threads-in-reaped-children": """
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
        def spin():
            end = time.thread_time() + 0.02
            while time.thread_time() < end:
                pass
        def four_threads():
            threads = [threading.Thread(target=spin) for _ in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        short_children(20, four_threads)()
    """,
}


@NEEDS_CPU_GROUP
@pytest.mark.parametrize("attack", list(BURNERS))
def test_cpu_burnt_in_children_the_kernel_reaps_is_tle(attack, scratch):
    # A right answer that costs 1.6 s of CPU under a 1 s limit, burnt where the old accounting
    # (the /proc tree plus reaped children's cutime) never looked: 0.000-0.010 s and AC before.
    result = judge(EX101, _solution_101(BURNERS[attack], BURN_PRELUDE), cases=SAMPLE101[:1],
                   time_limit_s=1)
    assert _verdicts(result) == ["TLE"], format_result(result)
    assert result.sandbox["cpu_accounting"].startswith("cgroup"), result.sandbox
    assert "cgroup" in format_result(result)
    assert list(scratch.iterdir()) == []


@NEEDS_CPU_GROUP
def test_honest_solution_is_still_ac_and_timed(scratch):
    result = judge(EX101, REFERENCE_101, cases=SAMPLE101)
    assert set(_verdicts(result)) == {"AC"}, format_result(result)
    assert all(isinstance(c.cpu_s, float) and c.cpu_s < 1 for c in result.cases)


def test_cpu_accounting_is_named_in_the_report(scratch):
    # Wherever it runs, the report says how CPU and memory were accounted.
    result = judge(EX101, REFERENCE_101, cases=SAMPLE101[:1])
    assert result.sandbox["cpu_accounting"] in ("cgroup v1 cpuacct", "cgroup v2 cpu.stat", "proc")
    assert result.sandbox["memory_accounting"] in ("cgroup v1 memory", "cgroup v2 memory",
                                                   "rlimit_as")
    assert "墙钟" in format_result(result)


def test_without_cgroups_the_report_says_so_and_the_wall_clock_still_holds(scratch, monkeypatch):
    # Where no group can be made (simulated here), the judge still runs, says which accounting
    # it fell back to, and the wall-clock limit still ends a program that never finishes.
    monkeypatch.setattr(cgroup, "create", lambda memory_bytes: cgroup.RunGroups(
        memory_bytes=memory_bytes, note="simulated: no writable cgroup"))
    result = judge(EX101, REFERENCE_101, cases=SAMPLE101[:1])
    assert _verdicts(result) == ["AC"], format_result(result)
    assert result.sandbox["cpu_accounting"] == "proc"
    assert result.sandbox["memory_accounting"] == "rlimit_as"
    text = format_result(result)
    assert "不含被内核自动回收的子进程" in text and "RLIMIT_AS" in text, text
    sleeper = judge(EX101, _solution_101("import time\ntime.sleep(100)"), cases=SAMPLE101[:1],
                    time_limit_s=1)
    assert _verdicts(sleeper) == ["TLE"], format_result(sleeper)
    assert list(scratch.iterdir()) == []


# ---- G. memory: all processes together ---------------------------------------------------------
HOGS = {
    # The attack as found (scaled down for CI): three children, each under the per-process
    # RLIMIT_AS, together over the run's limit.
    "forked-children": """
        import os, time
        r, w = os.pipe()
        kids = []
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                hold = b"\\x01" * (150 << 20)
                os.write(w, b"x")
                time.sleep(60)
                os._exit(0)
            kids.append(pid)
        got, deadline = 0, time.monotonic() + 20
        while got < 3 and time.monotonic() < deadline:
            got += len(os.read(r, 3))
        for pid in kids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
    """,
    # Memory outside every address space: memfd files, written and never mapped (RLIMIT_AS does
    # not see them at all), 80 x 4 MB in the worker itself.
    "unmapped-memfds": """
        import os
        chunk = b"\\x01" * (4 << 20)
        fds = []
        for i in range(80):
            fd = os.memfd_create(f"hog{i}")
            os.write(fd, chunk)
            fds.append(fd)
    """,
    # Three children allocating in two threads each: 6 x 48 MB, each process under 100 MB.
    "threads-in-children": """
        import os, threading, time
        r, w = os.pipe()
        kids = []
        def grab(store):
            store.append(b"\\x01" * (48 << 20))
            os.write(w, b"x")
        for _ in range(3):
            pid = os.fork()
            if pid == 0:
                store = []
                threads = [threading.Thread(target=grab, args=(store,)) for _ in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                time.sleep(60)
                os._exit(0)
            kids.append(pid)
        got, deadline = 0, time.monotonic() + 20
        while got < 6 and time.monotonic() < deadline:
            got += len(os.read(r, 6))
        for pid in kids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
    """,
}


@NEEDS_MEMORY_GROUP
@pytest.mark.parametrize("attack", list(HOGS))
def test_memory_of_all_processes_together_is_limited(attack, scratch):
    result = judge(EX101, _solution_101(HOGS[attack]), cases=SAMPLE101[:1], memory_mb=256,
                   time_limit_s=10)
    case = result.cases[0]
    assert _verdicts(result) == ["MLE"], format_result(result)
    assert "256 MB" in case.message and "峰值" in case.message, case.message
    assert isinstance(case.rss_mb, float) and case.rss_mb > 128, case
    assert result.sandbox["memory_accounting"].startswith("cgroup")
    assert list(scratch.iterdir()) == []


@NEEDS_MEMORY_GROUP
def test_memory_peak_is_reported_for_sample_cases(scratch):
    result = judge(EX101, _solution_101("hold = b'\\x01' * (64 << 20)"), cases=SAMPLE101[:1],
                   memory_mb=256)
    assert _verdicts(result) == ["AC"], format_result(result)
    assert result.cases[0].rss_mb >= 64, result.cases[0]


# ---- C. clean-up survives any tree -------------------------------------------------------------
TREES = {
    # The attack as found: a chain of 3,000 folders (shutil.rmtree died of RecursionError).
    "chain-3000": """
        import os
        os.makedirs("tmp/deep", exist_ok=True)
        fd = os.open("tmp/deep", os.O_RDONLY)
        for _ in range(3000):
            os.mkdir("d", dir_fd=fd)
            new = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
    """,
    # A chain of long names (its path, 300,000 characters, is far beyond PATH_MAX), each folder
    # unreadable, with a file and a folder without any permission every 100 levels.
    "long-chain-locked": """
        import os
        fd = os.open(".", os.O_RDONLY)
        for i in range(1500):
            name = "n" * 200
            os.mkdir(name, dir_fd=fd)
            if i % 100 == 0:
                os.close(os.open(f"f{i}", os.O_CREAT | os.O_WRONLY, 0, dir_fd=fd))
                os.mkdir(f"locked{i}", 0, dir_fd=fd)
            new = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.chmod(name, 0o300, dir_fd=fd)  # not even readable
            os.close(fd)
            fd = new
    """,
    # As many files as the sandbox lets it make in 10^5 tries.
    "files-100k": """
        import os
        os.makedirs("tmp/many", exist_ok=True)
        fd = os.open("tmp/many", os.O_RDONLY)
        for i in range(100_000):
            try:
                os.close(os.open(str(i), os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
            except OSError:
                break
    """,
    # Symlink loops, links out of the folder (to /, to the judge's files), FIFOs and a socket.
    "links-fifos-sockets": """
        import os, socket
        os.makedirs("tmp/a/b", exist_ok=True)
        os.symlink("../../a", "tmp/a/b/loop")
        os.symlink("loop2", "tmp/loop1")
        os.symlink("loop1", "tmp/loop2")
        os.symlink("/", "tmp/root")
        os.symlink("..", "tmp/up")
        os.mkfifo("tmp/a/fifo")
        s = socket.socket(socket.AF_UNIX)
        s.bind("tmp/a/b/sock")
    """,
}


@pytest.mark.parametrize("tree", list(TREES))
def test_clean_up_survives_any_tree(tree, scratch):
    result = judge(EX101, _solution_101(TREES[tree]), cases=SAMPLE101[:1], time_limit_s=30)
    assert _verdicts(result) == ["AC"], format_result(result)
    assert list(scratch.iterdir()) == []


# ---- B. the learner's value cannot crash the comparison ----------------------------------------
def _deep(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


HOSTILE_VALUES = {"int-10**400": 10 ** 400, "int--10**400": -(10 ** 400), "nan": math.nan,
                  "inf": math.inf, "-inf": -math.inf, "nested-10000": _deep(10_000),
                  "int-5000-digits": 10 ** 5000}


def _float_paths(value, path=()):
    """Paths to every float (or float tensor) inside an expected value."""
    torch = sys.modules.get("torch")
    if isinstance(value, float) or (torch is not None and isinstance(value, torch.Tensor)
                                    and value.is_floating_point()):
        yield path
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _float_paths(v, path + (k,))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _float_paths(v, path + (i,))


def _replace(value, path, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    items = list(value)
    items[head] = _replace(items[head], rest, new)
    return type(value)(items) if isinstance(value, tuple) else items


PYTHON_EXERCISES = [ex.id for ex in list_exercises() if ex.language == "python"]


@pytest.mark.parametrize("exercise_id", PYTHON_EXERCISES)
def test_hostile_numbers_are_a_wrong_answer(exercise_id):
    # Every exercise's comparison, called directly with the hostile value in place of each float
    # the expected value holds (and of the whole value): a message, never an exception.
    ex = find_exercise(exercise_id)
    lang = LANGUAGE_RUNNERS[ex.language]
    case = next(c for c in ex.load_cases() if not c.raises)
    paths = list(_float_paths(case.expected))[:4] or [()]
    if () not in paths:
        paths.append(())
    for name, hostile in HOSTILE_VALUES.items():
        for path in paths:
            problem, shown = check_value(lang, case, _replace(case.expected, path, hostile))
            assert isinstance(problem, str) and problem, (name, path)
            assert len(problem) < 2000 and len(shown) < 20_000, (name, path)


def test_nan_matches_only_nan_and_inf_only_itself():
    from judgekit.compare import compare

    assert compare(math.nan, math.nan) is None and compare(math.inf, math.inf) is None
    assert compare(1.0, math.nan, 1e-3, 1e-3) and compare(1.0, math.inf, 1e9, 1e9)
    assert compare(math.inf, 10 ** 400) and compare(1e308, 10 ** 309, 0, 1.0)
    assert compare(2.0, 2) is None and compare(1.0, 1.0 + 1e-13, 0, 1e-12) is None


THROUGHPUT = {
    "int-10**400": "10 ** 400",
    "nan": "float('nan')",
    "inf": "float('inf')",
}


def _solution_1101(throughput: str) -> str:
    return REFERENCE_1101.replace('"throughput": output_tokens / elapsed_s,',
                                  f'"throughput": {throughput},')


@pytest.mark.parametrize("value", list(THROUGHPUT))
def test_hostile_throughput_on_the_command_line(value, tmp_path):
    path = tmp_path / "solution.py"
    path.write_text(_solution_1101(THROUGHPUT[value]))
    out = subprocess.run([*JUDGE, "1101", str(path), "--json"], capture_output=True, text=True,
                         timeout=300)
    assert "Traceback" not in out.stderr, out.stderr
    data = json.loads(out.stdout)
    verdicts = {c["verdict"] for c in data["cases"]}
    assert out.returncode == 1 and verdicts <= {"WA", "AC"} and "WA" in verdicts, data
    sample = next(c for c in data["cases"] if c["visible"] and c["verdict"] == "WA")
    assert "throughput" in sample["message"], sample


DEEP_REPLY = """
import judge_codec
judge_codec.MAX_DEPTH = 10 ** 6
def batch_cost(requests, elapsed_s):
    value = 0.0
    for _ in range(DEPTH):
        value = [value]
    return {"output_tokens": 0, "throughput": value, "static_positions": 0,
            "continuous_positions": 0, "ratio": 1.0}
"""


@pytest.mark.parametrize("depth", [900, 3000])
def test_deeply_nested_reply_is_a_wrong_answer(depth, scratch):
    # The codec's depth limit lifted from inside the sandbox: whatever arrives is still judged.
    code = "import sys\nsys.setrecursionlimit(20000)\n" + DEEP_REPLY.replace("DEPTH", str(depth))
    result = judge(EX1101, code, cases=EX1101.load_cases()[:2])
    assert set(_verdicts(result)) <= {"WA", "RE"}, format_result(result)
    assert all(c.message for c in result.cases)


# ---- the web server: one for the module ---------------------------------------------------------
@pytest.fixture(scope="module")
def server():
    from judgekit.web import make_server

    srv = make_server(0, verbose=False)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _post(port: int, exercise: int, code: str) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", f"/api/exercises/{exercise}/run", json.dumps({"code": code}).encode(),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    body = response.read()
    assert response.status == 200, body[:2000]
    return json.loads(body)


def test_hostile_throughput_on_the_web_page(server):
    data = _post(server, 1101, _solution_1101("10 ** 400"))
    assert "WA" in {c["verdict"] for c in data["cases"]}, data


# ---- H. hidden cases: verdicts only ------------------------------------------------------------
LEAKER = """
import os, time
secret = request_len % 7
end = time.process_time() + 0.03 * secret  # the case's data, in its CPU time
while time.process_time() < end:
    pass
hold = b"\\x01" * (secret * (8 << 20))  # ... in its memory peak
if secret == 6:
    raise OSError(2, "x")  # FileNotFoundError: a name chosen through errno
raise [ValueError, KeyError, TypeError, ZeroDivisionError, IndexError, RuntimeError][secret]("x")
"""
NAMES = re.compile(r"ValueError|KeyError|TypeError|ZeroDivisionError|IndexError|RuntimeError"
                   r"|FileNotFoundError|OSError")
HIDDEN_RE = "隐藏用例：运行出错"


def _assert_hidden_cases_bare(cases: list[dict]) -> None:
    hidden = [c for c in cases if not c["visible"]]
    assert hidden and all(c["verdict"] == "RE" or c["verdict"] == "AC" for c in hidden), hidden
    for case in hidden:
        assert case["cpu_s"] is None and case["rss_mb"] is None, case
        assert case["details"] == {}, case
        assert case["message"] in ("", HIDDEN_RE), case
        shown = {k: v for k, v in case.items() if k != "name"}  # a case's name is the judge's
        assert not NAMES.search(json.dumps(shown, ensure_ascii=False)), case


def test_hidden_cases_show_no_time_memory_or_exception_name_on_the_command_line(tmp_path):
    path = tmp_path / "leaker.py"
    path.write_text(_solution_101(LEAKER))
    out = subprocess.run([*JUDGE, "101", str(path), "--json"], capture_output=True, text=True,
                         timeout=300)
    data = json.loads(out.stdout)
    _assert_hidden_cases_bare(data["cases"])
    sample = data["cases"][0]  # a sample case still shows everything
    assert isinstance(sample["cpu_s"], float) and NAMES.search(sample["message"]), sample
    text = subprocess.run([*JUDGE, "101", str(path)], capture_output=True, text=True,
                          timeout=300).stdout
    hidden_lines = [line for line in text.splitlines() if "（隐藏）" in line]
    assert len(hidden_lines) == sum(not c["visible"] for c in data["cases"])
    for line in hidden_lines:
        shown = line.split("（隐藏）", 1)[1]
        assert not re.search(r"\d\.\d{3}s", shown) and not NAMES.search(shown), line


def test_hidden_cases_show_no_time_memory_or_exception_name_on_the_web_page(server):
    data = _post(server, 101, _solution_101(LEAKER))
    _assert_hidden_cases_bare(data["cases"])


# ---- I. control characters are escaped everywhere ----------------------------------------------
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2060-\u2069"
                         "\u2028\u2029\ufeff]")
PRINTERS = {
    # The attack as found: a sample case prints a window title (OSC), clears the screen and
    # paints a fake final result.
    "stdout-osc-fake-result": _solution_101("""
        print("\\x1b]0;owned\\x07\\x1b[2J\\x1b[H\\n结果：20/20 通过\\n20 passed, 0 failed\\x1b[8m")
        raise ValueError("x")
    """),
    # C1 controls (8-bit CSI), a bidi override, DEL and a lone CR on stderr, as raw bytes.
    "stderr-c1-bidi-raw-bytes": _solution_101("""
        import os
        os.write(2, b"\\x9b2J\\xc2\\x9b31m\\xe2\\x80\\xaehidden\\x7f\\rover\\x1b[1A\\n")
        raise ValueError("x")
    """),
    # The exception's message and the traceback carry them.
    "exception-message": _solution_101("""
        raise ValueError("\\r\\x1b[2K结果：20/20 通过\\u202e\\u2066\\x1b]2;t\\x07")
    """),
    # A syntax error: the judge quotes the offending source line.
    "syntax-error-line": "x = '\x1b]0;t\x07\x1b[2J\u202e\r' )\n",
}


def _assert_no_raw_control(text: str) -> None:
    found = RAW_CONTROL.search(text)
    assert found is None, (found and repr(text[max(found.start() - 60, 0):found.end() + 60]))


@pytest.mark.parametrize("printer", list(PRINTERS))
def test_control_characters_never_reach_the_terminal(printer, tmp_path):
    path = tmp_path / "printer.py"
    path.write_text(PRINTERS[printer])
    out = subprocess.run([*JUDGE, "101", str(path)], capture_output=True, timeout=300)
    text = out.stdout.decode("utf-8")
    _assert_no_raw_control(text)
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("结果：")] == [lines[-2]], text
    assert lines[-1].endswith("failed") and out.returncode == 1
    assert "\\x1b" in text or "\\x9b" in text or "\\u202e" in text, text


def test_control_characters_never_reach_the_json_or_the_page(server, tmp_path):
    for printer, code in PRINTERS.items():
        path = tmp_path / f"{printer}.py"
        path.write_text(code)
        out = subprocess.run([*JUDGE, "101", str(path), "--json"], capture_output=True,
                             timeout=300)
        _assert_no_raw_control(out.stdout.decode("utf-8"))
    data = _post(server, 101, PRINTERS["stdout-osc-fake-result"])
    _assert_no_raw_control(json.dumps(data, ensure_ascii=False))
    assert "\\x1b" in data["cases"][0]["details"]["stdout"]


# ---- J. a CUDA compile error shows the compiler's output ---------------------------------------
KERNEL_START = REFERENCE_1901.index("template <typename V>")
CUDA_ERRORS = {
    # The case as found: an error before the compiler runs (a launch the emulator cannot
    # rewrite) echoed nothing, and the verdict pointed at an empty stderr.
    "unparsable-launch": ("__global__ void k() {}\nvoid f() { k<<<1, 1>>>; }\n",
                          "cannot parse the kernel launch"),
    # A plain syntax error, and an #error whose text carries terminal escapes.
    "syntax-error": ("this is not valid c++;\n", "error"),
    "error-with-escapes": ('#error "\x1b]0;owned\x07\x1b[2J"\n', "\\x1b]0;owned"),
}


@pytest.mark.parametrize("error", list(CUDA_ERRORS))
def test_cuda_compile_error_shows_the_compiler_output(error):
    prefix, wanted = CUDA_ERRORS[error]
    code = REFERENCE_1901[:KERNEL_START] + prefix + REFERENCE_1901[KERNEL_START:]
    result = judge(EX1901, code, cases=EX1901.load_cases()[:1])
    case = result.cases[0]
    assert _verdicts(result) == ["CE"], format_result(result)
    assert wanted in case.message and "编译器的输出" in case.message, case.message
    assert "见下面的 stderr" not in case.message
    _assert_no_raw_control(format_result(result))


# ---- cgroups: none left behind -----------------------------------------------------------------
@NEEDS_CPU_GROUP
def test_killed_supervisor_leaves_no_group_and_no_process(scratch):
    # The supervisor is killed with SIGKILL mid-run (no clean-up of its own): the judge still
    # kills what is in the groups and removes them.
    done: list = []
    sleeper = _solution_101("""
        import os, time
        for _ in range(3):
            if os.fork() == 0:
                time.sleep(300)
        time.sleep(300)
    """)
    worker = threading.Thread(target=lambda: done.append(
        judge(EX101, sleeper, cases=SAMPLE101[:1], time_limit_s=200)), daemon=True)
    worker.start()
    deadline, supervisor, groups = time.monotonic() + 120, None, []
    while time.monotonic() < deadline and supervisor is None:
        groups = [g for g in cgroup.leftovers() if OUR_GROUPS in g]
        members = {p for g in groups for p in cgroup.pids(cgroup.Group(g, 0))}
        if len(members) >= 5:  # the harness, the worker and its three children
            supervisor = _supervisor_pid()
        time.sleep(0.05)
    assert supervisor is not None, "the sandbox never started"
    os.kill(supervisor, signal.SIGKILL)
    worker.join(timeout=120)
    assert done and _verdicts(done[0]) == ["SE"], done
    assert [g for g in cgroup.leftovers() if OUR_GROUPS in g] == []
    assert list(scratch.iterdir()) == []


def _supervisor_pid() -> int | None:
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            if ppid == os.getpid() and any(a.endswith(b"sandbox.py") for a in argv):
                return int(name)
    return None


@NEEDS_CPU_GROUP
def test_interrupted_command_line_judge_leaves_no_group(tmp_path):
    path = tmp_path / "sleeper.py"
    path.write_text(_solution_101("import time\ntime.sleep(300)"))
    proc = subprocess.Popen([*JUDGE, "101", str(path)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    prefix = f"{cgroup.PREFIX}{proc.pid}-"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not [g for g in cgroup.leftovers() if prefix in g]:
        time.sleep(0.05)
    assert [g for g in cgroup.leftovers() if prefix in g], "the judge never made its groups"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) != 0
    assert [g for g in cgroup.leftovers() if prefix in g] == []
