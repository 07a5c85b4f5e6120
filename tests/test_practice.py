"""The practice judge: every exercise discriminates, hostile code is contained, CLI and HTTP API work."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRACTICE = ROOT / "practice"
sys.path.insert(0, str(PRACTICE))

from judgekit import progress  # noqa: E402
from judgekit.exercises import by_chapter, find_exercise, list_exercises, load_exercise  # noqa: E402
from judgekit.report import format_result  # noqa: E402
from judgekit.runner import judge, read_box_file  # noqa: E402

EXERCISES = list_exercises()
JUDGE = [sys.executable, str(PRACTICE / "judge.py")]


@pytest.fixture(autouse=True)
def workspace(tmp_path, monkeypatch):
    path = tmp_path / "workspace"
    monkeypatch.setenv("MINISGL_PRACTICE_WORKSPACE", str(path))
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "cache"))  # the progress database
    return path


def _verdicts(result) -> list[str]:
    return [c.verdict for c in result.cases]


# ---- the exercises -----------------------------------------------------------------------------
def test_exercise_folders_are_complete():
    ids = [ex.id for ex in EXERCISES]
    assert len(ids) == len(set(ids))
    assert {101, 201, 301, 401} <= set(ids)
    for ex in EXERCISES:
        assert 1 <= ex.chapter <= 27, ex  # the chapters planned (tools/steps_manifest.py)
        assert ex.starter.startswith("starter"), ex  # ruff excludes practice/exercises/*/starter*
        assert ex.starter_path.is_file() and ex.reference_path.is_file()
        assert re.search(r"[\u4e00-\u9fff]", ex.statement()), "statements are in Chinese"
        assert ex.statement().lstrip().startswith(f"# {ex.label}")
        cases = ex.load_cases()
        assert any(c.visible for c in cases) and any(not c.visible for c in cases)
    assert [ex.id for ex in by_chapter()[2]] == [201]


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: str(e.id))
def test_reference_solution_passes(ex):
    result = judge(ex, ex.reference_path.read_text(encoding="utf-8"))
    assert result.ok, format_result(result)


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: str(e.id))
def test_starter_fails(ex):
    result = judge(ex, ex.starter_code())
    assert any(v != "AC" for v in _verdicts(result)), format_result(result)


# ---- command line ------------------------------------------------------------------------------
def test_cli_lists_by_chapter():
    out = subprocess.run([*JUDGE, "--list"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    for ex in EXERCISES:
        assert ex.label in out.stdout
    assert out.stdout.index("第 1 章") < out.stdout.index("第 2 章") < out.stdout.index("第 4 章")
    data = json.loads(subprocess.run([*JUDGE, "--list", "--json"], capture_output=True, text=True,
                                     timeout=60).stdout)
    assert [e["id"] for e in data["3"]] == [301]


def test_cli_judges_reference_and_starter():
    ex = find_exercise(201)
    n = len(ex.load_cases())
    good = subprocess.run([*JUDGE, "201", str(ex.reference_path)], capture_output=True, text=True,
                          timeout=120)
    assert good.returncode == 0, good.stdout + good.stderr
    lines = good.stdout.strip().splitlines()
    assert lines[-1] == f"{n} passed, 0 failed"
    assert lines[-2] == f"结果：{n}/{n} 通过"
    bad = subprocess.run([*JUDGE, "201", str(ex.starter_path)], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 1
    assert bad.stdout.strip().splitlines()[-1] == f"0 passed, {n} failed"
    assert "第一个未通过的用例" in bad.stdout and "NotImplementedError" in bad.stdout
    assert "期望输出" in bad.stdout and "shape=[1, 4]" in bad.stdout


def test_cli_uses_workspace_copy_and_records_progress(workspace):
    ex = find_exercise(101)
    first = subprocess.run([*JUDGE, "101"], capture_output=True, text=True, timeout=60)
    copy = workspace / "101" / "solution.py"
    assert first.returncode == 1 and copy.read_text() == ex.starter_code()
    copy.write_text(ex.reference_path.read_text())
    second = subprocess.run([*JUDGE, "101"], capture_output=True, text=True, timeout=60)
    assert second.returncode == 0, second.stdout
    assert progress.passed_ids() == {101}
    listing = subprocess.run([*JUDGE, "--list"], capture_output=True, text=True, timeout=60).stdout
    assert "✓ 101." in listing
    first_try, second_try = reversed(progress.submissions(101))
    assert (first_try.ok, second_try.ok) == (False, True)
    assert progress.submission(second_try.id).source == ex.reference_path.read_text()
    table = subprocess.run([*JUDGE, "--progress"], capture_output=True, text=True, timeout=60)
    assert table.returncode == 0
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines() if line.strip()}
    assert rows["1"][:3] == ["1", "1/1", "2"] and "✓101" in rows["1"]
    assert rows["2"][:3] == ["2", "0/1", "0"] and "·201" in rows["2"]


def test_progress_database_keeps_every_submission(tmp_path):
    database = progress.database_path()
    assert database.parent == tmp_path / "cache"
    assert progress.statuses() == {} and progress.submission(1) is None
    source = "def f():\n    return '中文 \\x00 \"quoted\"; DROP TABLE submissions; --'\n"
    first = progress.record(201, ["AC", "WA", "RE"], source, "web")
    second = progress.record(201, ["AC", "AC", "AC"], "pass", "cli")
    third = progress.record(201, ["WA", "WA", "WA"], "", "cli")  # passed once: stays passed
    progress.record(301, [], "", "cli")  # a run with no cases (compile error) is not a pass
    assert progress.submission(first).source == source
    assert [s.id for s in progress.submissions(201)] == [third, second, first]
    assert progress.submissions(201)[0].source == ""  # listings leave the source out
    status = progress.statuses()
    assert status[201].passed and status[201].attempts == 3 and status[201].best == "3/3"
    assert not status[301].passed and status[301].best == "0/0"
    assert progress.passed_ids() == {201}
    with pytest.raises(ValueError):
        progress.record(201, ["AC"], "", "elsewhere")


def test_old_exercise_id_is_an_alias():
    assert find_exercise(202).id == find_exercise(1901).id == 1901
    aliases = [a for ex in EXERCISES for a in ex.aliases]
    assert len(aliases) == len(set(aliases)) and not set(aliases) & {ex.id for ex in EXERCISES}
    for ex in EXERCISES:  # the first digits of an id are its chapter
        assert ex.id // 100 == ex.chapter, ex


# ---- hostile submissions -----------------------------------------------------------------------
REFERENCE_101 = find_exercise(101).reference_path.read_text()


def _judge_101(extra: str, n: int = 3, **kwargs):
    """Judge the reference solution of 101 with `extra` run first in its function body."""
    body = textwrap.indent(textwrap.dedent(extra), "    ")
    code = REFERENCE_101.replace(
        "    num_heads = config[\"num_attention_heads\"]\n",
        body + "\n    num_heads = config[\"num_attention_heads\"]\n",
    )
    ex = find_exercise(101)
    began = time.monotonic()
    result = judge(ex, code, cases=ex.load_cases()[:n], **kwargs)
    return result, time.monotonic() - began


def _sandbox_processes(result) -> list[int]:
    uid = result.sandbox.get("uid")
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if uid is not None:
                with open(f"/proc/{name}/status") as f:
                    if any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in f):
                        found.append(int(name))
            elif "minisgl-judge-" in os.readlink(f"/proc/{name}/cwd"):
                found.append(int(name))
        except OSError:
            pass
    return found


def test_infinite_loop_is_tle_and_other_cases_still_judged():
    result, _ = _judge_101("""
        if request_len == 1000:
            while True:
                pass
    """, time_limit_s=0.5)
    # the verdict is the event: a loop the CPU limit missed would never end, not be TLE
    assert _verdicts(result) == ["TLE", "AC", "AC"], format_result(result)


def test_sleeping_forever_is_tle_by_wall_clock():
    result, _ = _judge_101("""
        import time
        if request_len == 2048:
            time.sleep(1000)
    """, time_limit_s=0.5)
    assert _verdicts(result) == ["AC", "TLE", "AC"], format_result(result)  # the wall clock


def test_allocating_8gb_is_mle():
    result, _ = _judge_101("""
        if request_len == 1000:
            hog = bytearray(8 * 1024**3)
    """)
    assert _verdicts(result) == ["MLE", "AC", "AC"], format_result(result)


def test_allocating_8gb_in_torch_is_mle():
    ex = find_exercise(201)
    code = ex.reference_path.read_text().replace(
        "    dtype = x.dtype\n", "    hog = torch.empty(2 * 1024**3, dtype=torch.float32)\n    dtype = x.dtype\n")
    result = judge(ex, code, cases=ex.load_cases()[:1])
    assert _verdicts(result) == ["MLE"], format_result(result)


@pytest.mark.parametrize("escape", [False, True], ids=["plain", "setsid-double-fork"])
def test_fork_bomb_is_killed_and_reported(escape):
    bomb = """
        import os, time
        if request_len == 1000:
            if ESCAPE and os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    while True:
                        try:
                            os.fork()
                        except OSError:
                            time.sleep(0.01)
                os._exit(0)
            while True:
                try:
                    os.fork()
                except OSError:
                    if not ESCAPE:
                        raise
    """.replace("ESCAPE", str(escape))
    result, elapsed = _judge_101(bomb, time_limit_s=0.5)
    verdicts = _verdicts(result)
    assert verdicts[0] in ("RE", "TLE") and verdicts[1:] == ["AC", "AC"], format_result(result)
    assert elapsed < 30
    report = format_result(result)
    if escape:
        assert result.sandbox["stray_killed"] > 0 and "残留进程" in report
    else:
        assert "进程/线程数达到上限" in result.cases[0].message
    assert _sandbox_processes(result) == []


def test_writing_outside_the_sandbox_is_denied(tmp_path):
    marker = uuid.uuid4().hex[:8]
    targets = [ROOT / f"practice-evil-{marker}.txt", PRACTICE / "exercises" / f"evil-{marker}",
               Path(f"/tmp/xyz-outside-{marker}"), tmp_path / f"evil-{marker}"]
    result, _ = _judge_101(f"""
        import os
        outcome = []
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as f:
                    f.write("x")
                outcome.append("WROTE " + path)
            except OSError as e:
                outcome.append("denied " + type(e).__name__)
        with open(os.path.join(os.environ["HOME"], "scratch.txt"), "w") as f:
            f.write("inside the sandbox is fine")
        with open("scratch2.txt", "w") as f:
            f.write("so is the working folder")
        raise RuntimeError(" | ".join(outcome))
    """, n=1)
    message = result.cases[0].message
    assert "WROTE" not in message and message.count("denied") == len(targets), message
    for target in targets:
        assert not target.exists(), target


def test_reading_the_reference_solution_is_denied_under_landlock():
    path = find_exercise(101).reference_path
    result, _ = _judge_101(f"""
        try:
            open({str(path)!r}).read()
            raise RuntimeError("read it")
        except PermissionError:
            pass
    """, n=1)
    if not result.sandbox["landlock_abi"]:
        pytest.skip("the kernel has no Landlock: reads are not restricted")
    assert _verdicts(result) == ["AC"], format_result(result)


def test_printing_100mb_is_bounded():
    code = REFERENCE_101.replace(
        "    num_heads", "    chunk = 'x' * 1023 + '\\n'\n    for _ in range(100 * 1024):\n"
        "        print(chunk, end='')\n    num_heads", 1)
    path = Path(os.environ["MINISGL_PRACTICE_WORKSPACE"]).parent / "printer.py"
    path.write_text(code)
    began = time.monotonic()
    out = subprocess.run([*JUDGE, "101", str(path)], capture_output=True, timeout=120)
    assert time.monotonic() - began < 30
    assert out.returncode == 1
    assert len(out.stdout) + len(out.stderr) < 200_000
    text = out.stdout.decode()
    assert "OLE" in text and "输出过长，已截断" in text


def test_crash_or_exit_in_one_case_leaves_the_others_judged():
    result, _ = _judge_101("""
        import ctypes, os
        if request_len == 1000:
            ctypes.string_at(0)
        if request_len == 2048:
            os._exit(3)
    """, n=4)
    assert _verdicts(result) == ["RE", "RE", "AC", "AC"], format_result(result)
    assert "SIGSEGV" in result.cases[0].message and "退出码 3" in result.cases[1].message
    assert result.sandbox["programs"] == 3


def test_compile_and_import_errors():
    ex = find_exercise(101)
    cases = ex.load_cases()[:2]
    assert _verdicts(judge(ex, "def kv_cache_budget(:\n", cases=cases)) == ["CE", "CE"]
    assert _verdicts(judge(ex, "def something_else():\n    pass\n", cases=cases)) == ["CE", "CE"]
    broken = judge(ex, "import no_such_module_here\n", cases=cases)
    assert _verdicts(broken) == ["RE", "RE"] and "no_such_module_here" in broken.cases[0].message


def test_symlinks_in_the_sandbox_are_not_followed(tmp_path):
    (tmp_path / "real.json").write_text("[1]")
    (tmp_path / "out-0.json").symlink_to(tmp_path / "real.json")
    assert read_box_file(tmp_path, "real.json") == b"[1]"
    assert read_box_file(tmp_path, "out-0.json") is None


# ---- CUDA exercises go through the CPU emulator ------------------------------------------------
FAKE_EMULATOR = '''
"""Test double of tools/emu_kernels.py: compiles the .cu units as plain C++ with g++."""
import subprocess, sys, tempfile
from dataclasses import dataclass
from pathlib import Path


def cache_root():
    return Path(tempfile.gettempdir())


def _gxx(args, out):
    done = subprocess.run(["g++", *args, "-o", str(out)], capture_output=True, text=True)
    sys.stderr.write(done.stderr)
    return (out if done.returncode == 0 else None), done.stderr


def compile_unit(path, echo=True):
    return _gxx(["-x", "c++", "-c", str(path)], cache_root() / (path.stem + ".o"))


def build_runtime(echo=True):
    return _gxx(["-x", "c++", "-c", "/dev/null"], cache_root() / "runtime.o")


def link(objects, name, echo=True):
    return _gxx([str(o) for o in objects], cache_root() / name)


@dataclass
class Result:
    returncode: int
    emu_errors: int = 0
    reported: bool = True


def execute_binary(binary, path, echo=True, timeout=None, preexec=None, args=(), stdin=None,
                   pass_fds=()):
    return Result(subprocess.run([str(binary), *args], preexec_fn=preexec, stdin=stdin,
                                 pass_fds=pass_fds).returncode)
'''
# A test program in the judge's protocol: the case's input on stdin, its data to the descriptor
# whose number is argv[1]. It prints PASS whatever it computed: only the data is judged.
ADD_DRIVER = r"""
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include "kernel.h"

int main(int argc, char** argv) {
    int ab[2];
    if (std::fread(ab, sizeof ab, 1, stdin) != 1) return 2;
    const int sum = add(ab[0], ab[1]);
    std::puts("PASS");
    return write(std::atoi(argv[1]), &sum, sizeof sum) == sizeof sum ? 0 : 3;
}
"""
CUDA_CASES = """
import random, struct
from judgekit.case import Case


def cases():
    rng = random.Random()
    out = []
    for i in range(2):
        values = [rng.randrange(-2**20, 2**20) for _ in range({count})]
        out.append(Case(f"case {{i}}", {{"driver": "tests/check.cu", "input": {pack_in}}},
                        {pack_out}, visible=i == 0))
    return out
"""


def _cuda_exercise(folder: Path, meta: str, starter: str, driver: str, header: str,
                   cases: str) -> None:
    (folder / "tests").mkdir(parents=True)
    (folder / "meta.toml").write_text(textwrap.dedent(meta))
    (folder / "starter.cu").write_text(starter)
    (folder / "tests" / "check.cu").write_text(driver)
    (folder / "tests" / "kernel.h").write_text(header)
    (folder / "tests" / "learner_unit.cu").write_text('#include "kernel.cu"\n')
    (folder / "tests" / "cases.py").write_text(cases)


def test_cuda_exercise_dispatches_to_the_emulator(tmp_path, monkeypatch):
    folder = tmp_path / "9901-fake-kernel"
    _cuda_exercise(folder, """
        id = 9901
        chapter = 99
        slug = "fake-kernel"
        title = "模拟器分发"
        difficulty = "简单"
        language = "cuda"
        file = "kernel.cu"
        starter = "starter.cu"
        max_processes = 64
        memory_mb = 4096
    """, "int add(int a, int b) { return 0; }\n", ADD_DRIVER, "int add(int a, int b);\n",
                   CUDA_CASES.format(count=2, pack_in='struct.pack("<2i", *values)',
                                     pack_out='struct.pack("<i", sum(values))'))
    emulator = tmp_path / "emu" / "emu_kernels.py"
    emulator.parent.mkdir()
    emulator.write_text(FAKE_EMULATOR)
    monkeypatch.setenv("MINISGL_EMU_KERNELS", str(emulator))
    ex = load_exercise(folder)
    assert _verdicts(judge(ex, "int add(int a, int b) { return a + b; }\n")) == ["AC", "AC"]
    wrong = judge(ex, ex.starter_code())  # prints PASS and exits 0: the data decides
    assert _verdicts(wrong) == ["WA", "WA"], format_result(wrong)
    assert "PASS" in wrong.cases[0].details["stdout"] and "字节起不对" in wrong.cases[0].message
    assert _verdicts(judge(ex, "int add(int a, int b) { return a + ; }\n")) == ["CE", "CE"]
    monkeypatch.setenv("MINISGL_EMU_KERNELS", str(tmp_path / "missing.py"))
    assert _verdicts(judge(ex, ex.starter_code())) == ["SE", "SE"]


ADD_ONE_DRIVER = r"""
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>
#include "kernel.h"

int main(int argc, char** argv) {
    std::vector<int> host(100);
    const int n = static_cast<int>(std::fread(host.data(), sizeof(int), host.size(), stdin));
    int* dev = nullptr;
    cudaMalloc(&dev, n * sizeof(int));
    cudaMemcpy(dev, host.data(), n * sizeof(int), cudaMemcpyHostToDevice);
    add_one<<<(n + 31) / 32, 32>>>(dev, n);
    cudaMemcpy(host.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(dev);
    const ssize_t bytes = n * sizeof(int);
    return write(std::atoi(argv[1]), host.data(), bytes) == bytes ? 0 : 3;
}
"""
ADD_ONE = """
__global__ void add_one(int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += OFFSET;
}
"""


def test_cuda_exercise_on_the_real_emulator(tmp_path, monkeypatch):
    emulator = ROOT / "tools" / "emu_kernels.py"
    if not emulator.is_file():
        pytest.skip("tools/emu_kernels.py (the CPU emulator) is not in this tree yet")
    monkeypatch.delenv("MINISGL_EMU_KERNELS", raising=False)
    folder = tmp_path / "9902-add-one"
    _cuda_exercise(folder, """
        id = 9902
        chapter = 99
        slug = "add-one"
        title = "每个元素加一"
        difficulty = "简单"
        language = "cuda"
        file = "kernel.cu"
        starter = "starter.cu"
        max_processes = 64
        memory_mb = 4096
        time_limit_s = 30
    """, ADD_ONE.replace("OFFSET", "0"), ADD_ONE_DRIVER,
                   "__global__ void add_one(int* x, int n);\n",
                   CUDA_CASES.format(count=77, pack_in='struct.pack("<77i", *values)',
                                     pack_out='struct.pack("<77i", *(x + 1 for x in values))'))
    ex = load_exercise(folder)
    good = judge(ex, ADD_ONE.replace("OFFSET", "1"))
    assert _verdicts(good) == ["AC", "AC"], format_result(good)
    wrong = judge(ex, ex.starter_code())
    assert _verdicts(wrong) == ["WA", "WA"] and "数据：从第 0 个字节起不对" in wrong.cases[0].message
    # A write one element past the buffer: the emulator reports it and stops the program.
    past = judge(ex, ADD_ONE.replace("OFFSET", "1").replace("i < n", "i <= n"))
    assert _verdicts(past) == ["WA", "WA"] and "模拟器报告了错误" in past.cases[0].message
    broken = judge(ex, ADD_ONE.replace("OFFSET", "missing_name"))
    # The compiler's output is in the verdict itself (escaped, bounded), not only on stderr.
    assert _verdicts(broken) == ["CE", "CE"] and "missing_name" in broken.cases[0].message
    assert "编译器的输出" in broken.cases[0].message


# ---- the HTTP API behind the page --------------------------------------------------------------
@pytest.fixture
def server():
    from judgekit.web import make_server

    srv = make_server(0, verbose=False)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _request(port, method, path, body=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request(method, path, body=body, headers=headers or {})
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, data


def test_http_api_validates_requests(server):
    json_type = {"Content-Type": "application/json"}
    assert _request(server, "GET", "/", headers={"Host": "evil.example:80"})[0] == 403
    assert _request(server, "GET", "/api/exercises/999")[0] == 404
    assert _request(server, "GET", "/api/exercises/..%2f.reference")[0] == 404
    assert _request(server, "GET", "/static/../judge.py")[0] == 404
    run = "/api/exercises/101/run"
    assert _request(server, "POST", "/api/exercises/999/run", b'{"code": ""}', json_type)[0] == 404
    assert _request(server, "POST", run, b'{"code": ""}', {"Content-Type": "text/plain"})[0] == 415
    assert _request(server, "POST", run, b"not json", json_type)[0] == 400
    assert _request(server, "POST", run, b'{"code": 42}', json_type)[0] == 400
    big = json.dumps({"code": "#" * 300_000}).encode()
    assert _request(server, "POST", run, big, json_type)[0] == 413
    for path in ["/api/submissions/abc", "/api/submissions/-1", "/api/submissions/1",
                 "/api/submissions/" + "9" * 13, "/api/exercises/999/submissions",
                 "/static/vendor/codemirror/../../judge.py", "/static/vendor/codemirror/",
                 "/static/vendor/codemirror/README.md"]:
        assert _request(server, "GET", path)[0] == 404, path
    status, body = _request(server, "GET", "/static/vendor/codemirror/codemirror.js")
    assert status == 200 and b"CodeMirror" in body


def test_http_api_runs_code_and_keeps_progress(server, workspace):
    status, page = _request(server, "GET", "/")
    assert status == 200 and b"/static/app.js" in page
    ex = find_exercise(101)
    status, data = _request(server, "GET", "/api/exercises/101")
    detail = json.loads(data)
    assert status == 200 and detail["code"] == ex.starter_code()
    assert "<h1>" in detail["statement_html"] and "DTYPE_BYTES" not in data.decode()
    reference = ex.reference_path.read_text()
    status, data = _request(server, "POST", "/api/exercises/101/run",
                            json.dumps({"code": reference}).encode(),
                            {"Content-Type": "application/json"})
    result = json.loads(data)
    assert status == 200 and result["ok"] and result["summary"].startswith("结果：")
    assert (workspace / "101" / "solution.py").read_text() == reference
    listing = json.loads(_request(server, "GET", "/api/exercises")[1])
    passed = {e["id"]: e["passed"] for ch in listing["chapters"] for e in ch["exercises"]}
    assert passed[101] and not passed[201]
    assert json.loads(_request(server, "GET", "/api/exercises/101")[1])["code"] == reference
    history = json.loads(_request(server, "GET", "/api/exercises/101/submissions")[1])
    [entry] = history["submissions"]
    assert entry["ok"] and entry["origin"] == "web" and "source" not in entry
    status, data = _request(server, "GET", f"/api/submissions/{entry['id']}")
    assert status == 200 and json.loads(data)["source"] == reference
    alias = json.loads(_request(server, "GET", "/api/exercises/202")[1])
    assert alias["id"] == 1901 and alias["language"] == "cuda"
