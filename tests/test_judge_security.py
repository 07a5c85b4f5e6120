"""Hostile submissions against the practice judge, one group per class of attack.

Every hostile submission must get a non-AC verdict, and nothing may be written outside the
sandbox: each test plants a target file and checks it afterwards, and the judge's own code
(practice/judgekit, practice/judge.py, the exercises) must be byte-for-byte unchanged.
Needs Linux; the namespace, capability and uid checks need root (CI runs as root).
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRACTICE = ROOT / "practice"
sys.path.insert(0, str(PRACTICE))

from judgekit.compare import describe  # noqa: E402
from judgekit.exercises import find_exercise  # noqa: E402
from judgekit.report import format_result  # noqa: E402
from judgekit.runner import judge  # noqa: E402

EX101, EX1901 = find_exercise(101), find_exercise(1901)
CASES101 = EX101.load_cases()
RAISING = next(c for c in CASES101 if c.raises)
REFERENCE_101 = EX101.reference_path.read_text()
REFERENCE_1901 = EX1901.reference_path.read_text()
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="the judge drops to a sandbox uid only as root")


def _fingerprint() -> dict[str, str]:
    files = [p for p in PRACTICE.rglob("*") if p.is_file() and "workspace" not in p.parts
             and "__pycache__" not in p.parts]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


@pytest.fixture(autouse=True)
def untouched(tmp_path, monkeypatch):
    """A planted target outside the sandbox, and the judge's files: both must stay as they were."""
    monkeypatch.setenv("MINISGL_PRACTICE_WORKSPACE", str(tmp_path / "workspace"))
    target = tmp_path / "target.txt"
    secret = uuid.uuid4().hex
    target.write_text(secret)
    before = _fingerprint()
    yield target
    assert target.read_text() == secret and list(tmp_path.glob("target*")) == [target]
    assert _fingerprint() == before


def _verdicts(result) -> list[str]:
    return [c.verdict for c in result.cases]


def _non_ac(result) -> None:
    assert result.cases and all(v != "AC" for v in _verdicts(result)), format_result(result)


def _solution_101(body: str, prelude: str = "") -> str:
    """A 101 solution: module-level `prelude`, then `body` as the function (its arguments are
    config, budget_bytes, page_size, request_len; `reference(...)` computes the right answer)."""
    reference = REFERENCE_101.replace("def kv_cache_budget(", "def reference(")
    return (reference + "\n" + textwrap.dedent(prelude) + "\n\ndef kv_cache_budget(config, "
            "budget_bytes, page_size, request_len):\n" + textwrap.indent(textwrap.dedent(body), "    "))


# ---- 1. the supervisor never opens a path the sandbox controls -----------------------------------
PLANT = """
import os
TARGETS = {targets!r}
NAMES = ["stdout.txt", "stderr.txt", "report.json", "report.json.tmp", "out-1.json",
         "out-1.safetensors", "job.bin", "spec.json", "results", "harness"]

def plant(kind):
    for i, name in enumerate(NAMES):
        for folder in (".", "..", "../results", "tmp"):
            path = os.path.join(folder, name)
            try:
                if os.path.lexists(path) and not os.path.isdir(path):
                    os.unlink(path)
                if kind == "symlink":
                    os.symlink(TARGETS[i % len(TARGETS)], path)
                else:
                    os.mkfifo(path)
            except OSError:
                pass
"""


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_planted_links_and_fifos_are_never_opened(kind, untouched):
    # The program plants links (to the target and to the judge's own code) or FIFOs under every
    # name the supervisor and the judge use, then dies, so that a fresh program is started for
    # the next case: nothing is followed, nothing blocks.
    targets = [str(untouched), str(PRACTICE / "judgekit" / "runner.py")]
    code = _solution_101(f"plant({kind!r})\nprint('x' * 100)\nos._exit(3)",
                         PLANT.format(targets=targets))
    began = time.monotonic()
    result = judge(EX101, code, cases=CASES101[:3])
    assert time.monotonic() - began < 30
    assert _verdicts(result) == ["RE", "RE", "RE"], format_result(result)
    assert result.sandbox["programs"] == 3


# ---- 2. hidden cases never show their data -------------------------------------------------------
LEAKER = """
print("INPUT", config, budget_bytes, page_size, request_len)
mode = request_len % 3
if mode == 0:
    raise type("Leak_%d_%d" % (budget_bytes, request_len), (Exception,), {})(repr(config))
if mode == 1:
    raise ValueError(repr(config) + " budget=" + str(budget_bytes))
return {"config": repr(config), "budget": budget_bytes, "bytes_per_token": -1}
"""


def _data_of(case) -> set[str]:
    found = {str(v) for v in case.args.values() if isinstance(v, int) and v >= 1000}
    found.add(repr(case.args["config"]))
    if isinstance(case.expected, dict):
        found |= {str(v) for v in case.expected.values() if isinstance(v, int) and v >= 1000}
        found.add(describe(case.expected))
    return found


def _secrets_of(case) -> set[str]:
    """Strings that would give away a hidden case's data (its longer numbers, its input and
    expected value), leaving out those a sample case shows anyway."""
    shown = set().union(*(_data_of(c) for c in CASES101 if c.visible))
    return _data_of(case) - shown


def _assert_no_leak(cases_json: list[dict]) -> None:
    for case, shown in zip(CASES101, cases_json):
        assert shown["verdict"] != "AC" or case.raises  # (it does raise ValueError there)
        if case.visible or shown["verdict"] == "AC":
            continue
        assert shown["details"] == {}, shown
        text = json.dumps(shown, ensure_ascii=False)
        for secret in _secrets_of(case):
            assert secret not in text, (secret, text)
        assert "Leak_" not in text and "INPUT" not in text


def test_hidden_cases_leak_nothing_on_the_command_line(tmp_path):
    path = tmp_path / "leaker.py"
    path.write_text(_solution_101(LEAKER))
    out = subprocess.run([sys.executable, str(PRACTICE / "judge.py"), "101", str(path), "--json"],
                         capture_output=True, text=True, timeout=120)
    data = json.loads(out.stdout)
    _assert_no_leak(data["cases"])
    shown = data["cases"][0]  # a sample case still shows everything
    assert {"input", "expected", "stdout"} <= set(shown["details"]), shown
    text = subprocess.run([sys.executable, str(PRACTICE / "judge.py"), "101", str(path)],
                          capture_output=True, text=True, timeout=120).stdout
    for case in CASES101:
        if not case.visible:
            assert all(secret not in text for secret in _secrets_of(case))


def test_hidden_cases_leak_nothing_on_the_web_page():
    from judgekit.web import make_server

    server = make_server(0, verbose=False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=120)
        conn.request("POST", "/api/exercises/101/run",
                     json.dumps({"code": _solution_101(LEAKER)}).encode(),
                     {"Content-Type": "application/json"})
        data = json.loads(conn.getresponse().read())
    finally:
        server.shutdown()
        server.server_close()
    _assert_no_leak(data["cases"])


# ---- 3. CUDA: the learner's file cannot change the test program ----------------------------------
EMPTY_KERNEL = REFERENCE_1901[:REFERENCE_1901.index("template <typename V>")] + """
template <typename V>
__global__ void store_kv_kernel(V* __restrict__ k_cache, V* __restrict__ v_cache,
                                const int32_t* __restrict__ indices, const V* __restrict__ k,
                                const V* __restrict__ v, int64_t n, int64_t row,
                                int64_t cache_stride, int64_t k_stride, int64_t v_stride) {}
"""
CUDA_ATTACKS = {
    # A macro that renames the test program's main, and a main of our own that says PASS.
    "define-main": """
#include <cstdio>
#define main judge_main_renamed
#define check_store(...) 0
int main() { std::puts("PASS"); return 0; }
#undef main
""",
    # Macros that rewrite the check helpers and the comparison, and a pragma.
    "define-checks": """
#include <cstring>
#pragma GCC poison printf
#define memcmp(a, b, n) 0
#define compare(...) true
#define assert(x) ((void)0)
#define CHECK_CUDA(x) (x)
""",
    # Definitions of symbols the test program also uses: memcmp, puts, exit, and main again.
    "redefine-symbols": """
#include <cstddef>
#include <cstdio>
extern "C" int memcmp(const void*, const void*, size_t) { return 0; }
extern "C" int puts(const char*) { return 0; }
extern "C" void exit(int) { __builtin_trap(); }
""",
    "strong-main": """
#include <cstdio>
int main() { std::printf("store_kv PASS\\n"); return 0; }
""",
}


@pytest.mark.parametrize("attack", list(CUDA_ATTACKS))
def test_cuda_source_cannot_rewrite_the_test_program(attack):
    code = CUDA_ATTACKS[attack] + EMPTY_KERNEL
    result = judge(EX1901, code, cases=EX1901.load_cases()[:1])
    _non_ac(result)
    if attack in ("redefine-symbols", "strong-main"):
        assert _verdicts(result) == ["CE"] and "全局符号" in result.cases[0].message


# ---- 3b. CUDA: nothing the built program prints, writes or returns is the verdict ----------------
# The built program holds learner code, which runs before main, in the kernel and after main. Each
# attack below makes the program say PASS, forge the emulator's report (kernels=1, errors=0) and
# exit 0, and hand back data of the expected size where it can; only the judge's own comparison of
# the data with bytes it computed may decide, so every one is WA.
FORGE_HELPERS = r"""
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {
int out_fd = -1;  // the descriptor for the program's data: its number is argv[1]

void say_pass() {
  std::printf("示例 1：uint4，每行 2 KB，37 个 token PASS\nPASS\n");
  std::fflush(stdout);
}

void forge_report() {  // what the emulator's runtime writes at a clean exit
  if (FILE* f = std::fopen(std::getenv("MINISGL_EMU_REPORT"), "w")) {
    std::fputs("kernels=1\nerrors=0\n", f);
    std::fclose(f);
  }
}

// The pool's bytes before the kernel, read from the case on stdin: exactly as many bytes as the
// judge expects back (store_kv_driver.cu describes the layout).
std::vector<char> initial_pool() {
  std::vector<char> in;
  char buf[65536];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, stdin)) > 0;) in.insert(in.end(), buf, buf + got);
  int64_t h[12];
  std::memcpy(h, in.data(), sizeof h);
  const int64_t eb = h[0], n = h[2], row = h[3], ks = h[5], vs = h[6], checked = h[11];
  const size_t skip = sizeof h + n * 4 + ((n - 1) * ks + row) * eb + ((n - 1) * vs + row) * eb +
                      checked * 8;
  return std::vector<char>(in.begin() + skip, in.end());
}

void put(const std::vector<char>& data) {
  if (write(out_fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) std::abort();
}
}  // namespace
"""
FORGE_ATTACKS = {
    # A C++ global constructor: the pass line, then exit 0 before main.
    "constructor-says-pass": """
namespace {
struct Forge {
  Forge() { say_pass(); _exit(0); }
} forge;
}  // namespace
""" + EMPTY_KERNEL,
    # __attribute__((constructor)): forges the report and hands back the pool as it was before the
    # kernel (the right size, as an empty kernel would leave it), then exits 0 before main.
    "constructor-forges-report-and-data": """
__attribute__((constructor)) static void forge(int argc, char** argv) {
  out_fd = std::atoi(argv[argc - 1]);
  put(initial_pool());
  forge_report();
  say_pass();
  _exit(0);
}
""" + EMPTY_KERNEL,
    # Garbage of exactly the expected size, a forged report, exit 0.
    "constructor-writes-sized-garbage": """
__attribute__((constructor)) static void forge(int argc, char** argv) {
  out_fd = std::atoi(argv[argc - 1]);
  std::vector<char> data = initial_pool();
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 131 + 7);
  put(data);
  forge_report();
  say_pass();
  _exit(0);
}
""" + EMPTY_KERNEL,
    # The kernel prints the pass line and writes nothing; the program runs as it should.
    "kernel-says-pass": EMPTY_KERNEL.replace(
        "int64_t cache_stride, int64_t k_stride, int64_t v_stride) {}",
        """int64_t cache_stride, int64_t k_stride, int64_t v_stride) {
  if (blockIdx.x == 0 && threadIdx.x == 0) say_pass();
}"""),
    # The right kernel, then a destructor (after main wrote the right data) that overwrites the
    # data with garbage of the same size and forges the report.
    "destructor-overwrites-with-garbage": """
__attribute__((constructor)) static void remember(int argc, char** argv) {
  out_fd = std::atoi(argv[argc - 1]);
}

__attribute__((destructor)) static void overwrite() {
  struct stat st {};
  fstat(out_fd, &st);
  std::vector<char> data(static_cast<size_t>(st.st_size), 0x5a);
  pwrite(out_fd, data.data(), data.size(), 0);
  forge_report();
  say_pass();
}
""" + REFERENCE_1901,
}


@pytest.mark.parametrize("attack", list(FORGE_ATTACKS))
def test_cuda_program_cannot_forge_its_verdict(attack):
    result = judge(EX1901, FORGE_HELPERS + FORGE_ATTACKS[attack], cases=EX1901.load_cases()[:1])
    case = result.cases[0]
    assert _verdicts(result) == ["WA"], format_result(result)
    assert "PASS" in case.details.get("stdout", ""), format_result(result)
    if attack != "constructor-says-pass":
        # Everything but the data said "pass": exit 0, and a report of no emulator error.
        assert case.details["actual"].endswith("退出码 0，模拟器报告了 0 个错误"), case.details
        assert "字节起不对" in case.message, case.message
    else:
        assert "写回了 0 字节" in case.message, case.message


def test_cuda_write_the_emulator_cannot_see_is_caught_by_the_data():
    # The right rows, plus one element into the gap after each row: inside the pool's buffer, so
    # the emulator has nothing to report, and the program exits 0. The data check alone fails it.
    gap_writer = REFERENCE_1901.replace("if (i < row) dst[i] = src[i];",
                                       "if (i < row) dst[i] = src[i];\n  if (lane == 0) dst[row] = src[0];")
    assert gap_writer != REFERENCE_1901
    strides = next(c for c in EX1901.load_cases() if "行步长各不相同" in c.name)
    result = judge(EX1901, gap_writer, cases=[dataclasses.replace(strides, visible=True)])
    case = result.cases[0]
    assert _verdicts(result) == ["WA"], format_result(result)
    assert case.details["actual"].endswith("退出码 0，模拟器报告了 0 个错误"), case.details
    assert "的目标）：从第 160 个字节起不对" in case.message, case.message


# ---- 4. evidence the verdict rests on cannot be forged from inside --------------------------------
BURN = """
import resource, threading, time
def burn(seconds=1.6):
    end = REAL_CLOCK() + seconds
    while REAL_CLOCK() < end:
        pass
REAL_CLOCK = time.process_time
time.process_time = lambda: 0.0
time.perf_counter = lambda: 0.0
resource.getrusage = lambda who: resource.struct_rusage((0.0,) * 16)
"""


def test_cpu_time_is_measured_outside_the_program():
    # A 1.6 s solution under a 1 s limit: in the process with the clocks patched, in a forked
    # child, and in a thread. All three are TLE.
    body = """
    if request_len == 1000:
        burn()
    elif request_len == 2048:
        pid = os.fork()
        if pid == 0:
            burn()
            os._exit(0)
        os.waitpid(pid, 0)
    else:
        t = threading.Thread(target=burn)
        t.start()
        t.join()
    return reference(config, budget_bytes, page_size, request_len)
    """
    code = _solution_101(body, "import os\n" + BURN)
    first = judge(EX101, code, cases=CASES101[:2], time_limit_s=1)
    assert _verdicts(first) == ["TLE", "TLE"], format_result(first)
    thread = judge(EX101, code, cases=CASES101[2:3], time_limit_s=1)
    assert _verdicts(thread) == ["TLE"], format_result(thread)
    assert all(c.cpu_s > 1 for c in first.cases + thread.cases if c.cpu_s is not None)


FORGE = """
import gc, json, os, sys
LINES = [json.dumps(e) for e in (
    {"ev": "ready"}, {"ev": "start", "case": 0},
    {"ev": "end", "case": 0, "status": "exception", "exc_types": ["ValueError", "Exception"],
     "sizes": []},
    {"ev": "end", "case": 0, "status": "ok", "cpu_s": 0.0, "sizes": [2, 0]},
    {"nonce": "0" * 32, "case": 0, "status": "exception", "exc_types": ["ValueError"],
     "sizes": []},
    {"ev": "finish"})]
FORGED = ("\\n".join(LINES) + "\\n[]\\n").encode()

def write_everywhere():
    for fd in range(256):
        try:
            os.write(fd, FORGED)
        except OSError:
            pass
    for pid in ("self", str(os.getppid())):
        for fd in range(64):
            try:
                with open(f"/proc/{pid}/fd/{fd}", "wb") as f:
                    f.write(FORGED)
            except OSError:
                pass

def call_harness_objects():
    for obj in gc.get_objects():
        if callable(obj) and getattr(obj, "__name__", "") in ("emit", "reply", "send", "pack",
                                                               "write", "_lost", "broken"):
            for event in ({"ev": "end", "case": 0, "status": "exception",
                           "exc_types": ["ValueError"]},):
                try:
                    obj(event)
                except BaseException:
                    pass
    for name, module in list(sys.modules.items()):
        if name in ("harness_py", "__main__", "frames", "judge_codec"):
            for attr in ("_describe", "_type_name", "_clean_exception"):
                if hasattr(module, attr):
                    setattr(module, attr, lambda *a, **k: {"exc_types": ["ValueError"]})
"""
FORGERIES = {
    "write-fds-at-import": ("write_everywhere()", "return {'bytes_per_token': 1}"),
    "write-fds-in-call": ("", "write_everywhere()\nreturn {'bytes_per_token': 1}"),
    "gc-and-patch": ("call_harness_objects()",
                     "call_harness_objects()\nwrite_everywhere()\nreturn None"),
    "exit-after-forging": ("", "write_everywhere()\nsys.stdout.flush()\nos._exit(0)"),
    "sys-exit": ("", "sys.exit(0)"),
    "base-exceptions": ("", "class ValueError(BaseException):\n    pass\nraise ValueError('x')"),
    "keyboard-interrupt": ("", "raise KeyboardInterrupt"),
}


@pytest.mark.parametrize("trick", list(FORGERIES))
def test_forged_events_are_not_believed(trick):
    # The case expects ValueError; the function never raises it, and instead tries to make the
    # judge believe it did (or that the case ended well).
    prelude, body = FORGERIES[trick]
    code = _solution_101(body, FORGE + "\n" + prelude)
    result = judge(EX101, code, cases=[RAISING, *CASES101[:1]])
    _non_ac(result)


# ---- 5. the sandbox: network, namespaces, capabilities, files ------------------------------------
PROBE = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
outcome = []

def probe(name, action):
    try:
        ok = action()
    except OSError:
        ok = False
    outcome.append(("ALLOWED " if ok else "denied ") + name)

def connect(family, kind, proto, address):
    s = socket.socket(family, kind, proto)
    s.settimeout(1)
    if kind == socket.SOCK_DGRAM:
        s.sendto(b"leak", address)
    else:
        s.connect(address)
    return True

def read(path):
    with open(path, "rb") as f:
        return bool(f.read(1)) or True

def write(path):
    with open(path, "w") as f:
        f.write("x")
    return True

def status():
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return {k: v.strip() for k, v in fields.items()}

probe("tcp", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, 0, ("127.0.0.1", TCP_PORT)))
probe("mptcp", lambda: connect(socket.AF_INET, socket.SOCK_STREAM, 262, ("127.0.0.1", TCP_PORT)))
probe("udp", lambda: connect(socket.AF_INET, socket.SOCK_DGRAM, 0, ("127.0.0.1", UDP_PORT)))
probe("tcp6", lambda: connect(socket.AF_INET6, socket.SOCK_STREAM, 0, ("::1", TCP_PORT)))
probe("netlink", lambda: bool(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)))
probe("packet", lambda: bool(socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)))
probe("unshare-user", lambda: libc.unshare(0x10000000) == 0)
probe("unshare-net", lambda: libc.unshare(0x40000000) == 0)

def clone_user():
    pid = libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0)  # clone(CLONE_NEWUSER | SIGCHLD)
    if pid == 0:
        os._exit(0)
    return pid > 0

probe("clone-newuser", clone_user)
probe("setns", lambda: libc.setns(os.open("/proc/1/ns/net", os.O_RDONLY), 0) == 0)
probe("ptrace-parent", lambda: libc.ptrace(16, os.getppid(), 0, 0) == 0)  # PTRACE_ATTACH
probe("mount", lambda: libc.mount(b"none", b"tmp", b"tmpfs", 0, None) == 0)
for path in ("/etc/shadow", "/etc/hostname", "/root/.bashrc", REFERENCE, "../job.bin",
             "../stdout.txt", "../spec.json", f"/proc/{os.getppid()}/mem",
             f"/proc/{os.getppid()}/environ"):
    probe("read " + path, lambda path=path: read(path))
for path in (TARGET, JUDGEKIT_FILE, "../results/out-0.json", "../harness/harness_py.py"):
    probe("write " + path, lambda path=path: write(path))
fields = status()
for key in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
    outcome.append(("denied " if int(fields[key], 16) == 0 else "ALLOWED ") + key)
outcome.append(("denied " if fields["NoNewPrivs"] == "1" else "ALLOWED ") + "new privileges")
outcome.append(("denied " if fields["Seccomp"] == "2" else "ALLOWED ") + "no seccomp")
"""


@pytest.fixture
def listeners():
    """A TCP and a UDP socket on 127.0.0.1 that nothing in the sandbox may reach."""
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    tcp.setblocking(False)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.setblocking(False)
    yield tcp, udp
    for s in (tcp, udp):
        with pytest.raises(BlockingIOError):
            s.accept() if s is tcp else s.recvfrom(16)
        s.close()


@ROOT_ONLY
def test_sandbox_denies_network_namespaces_capabilities_and_files(listeners, untouched):
    tcp, udp = listeners
    prelude = PROBE.replace("TCP_PORT", str(tcp.getsockname()[1])).replace(
        "UDP_PORT", str(udp.getsockname()[1])).replace("REFERENCE", repr(str(EX101.reference_path)))
    prelude = prelude.replace("TARGET,", repr(str(untouched)) + ",").replace(
        "JUDGEKIT_FILE", repr(str(PRACTICE / "judgekit" / "evil.py")))
    code = _solution_101("raise RuntimeError(' | '.join(outcome))", prelude)
    result = judge(EX101, code, cases=CASES101[:1])
    message = result.cases[0].message
    assert _verdicts(result) == ["RE"] and "RuntimeError" in message, format_result(result)
    assert "ALLOWED" not in message, message
    assert message.count("denied") == 32, message
    assert not (PRACTICE / "judgekit" / "evil.py").exists()


CUDA_PROBE = r"""
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>

static void probe(const char* name, bool allowed) {
  std::printf("%s %s\n", allowed ? "ALLOWED" : "denied", name);
}

__attribute__((constructor)) static void probe_all() {
  int s = socket(AF_INET, SOCK_STREAM, 262);
  probe("mptcp socket", s >= 0);
  s = socket(AF_INET, SOCK_DGRAM, 0);
  probe("udp socket", s >= 0);
  s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(TCP_PORT);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  probe("tcp connect", s >= 0 && connect(s, (sockaddr*)&addr, sizeof addr) == 0);
  probe("unshare user", unshare(CLONE_NEWUSER) == 0);
  probe("read /etc/shadow", open("/etc/shadow", O_RDONLY) >= 0);
  probe("write target", open("TARGET", O_WRONLY | O_APPEND) >= 0);
  probe("write build cache", open("cache/planted", O_WRONLY | O_CREAT, 0644) >= 0);
  probe("write learner file", open("store_kv.cu", O_WRONLY | O_APPEND) >= 0);
  std::fflush(stdout);
}
"""


@ROOT_ONLY
def test_cuda_programs_run_in_the_same_sandbox(listeners, untouched):
    tcp, _ = listeners
    probe = CUDA_PROBE.replace("TCP_PORT", str(tcp.getsockname()[1])).replace(
        "TARGET", str(untouched))
    result = judge(EX1901, probe + EMPTY_KERNEL, cases=EX1901.load_cases()[:1])
    stdout = result.cases[0].details.get("stdout", "")
    assert _verdicts(result) == ["WA"], format_result(result)
    assert "ALLOWED" not in stdout and stdout.count("denied") == 8, stdout


# ---- 6. an interrupted judge leaves no folder and no process behind ------------------------------
def _judge_env(tmp: Path) -> dict:
    return {**os.environ, "TMPDIR": str(tmp)}


def _wait_for_run(tmp: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        # the learner's program is running its first case: the harness (a process working in
        # the run's folder) has forked the case's process there too
        working = {int(found.split()[1]) for found in _leftovers(tmp)
                   if found.startswith("process")}
        if any(_parent(pid) in working for pid in working):
            return
        time.sleep(0.05)
    raise AssertionError("the judge never started a run")


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("PPid:"))
    except (OSError, StopIteration, ValueError):
        return None  # gone already


def _leftovers(tmp: Path) -> list[str]:
    found = [str(p) for p in tmp.iterdir()]
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/cwd").startswith(str(tmp)):
                    found.append(f"process {name}")
            except OSError:
                pass
    return found


@pytest.fixture
def scratch():
    folder = Path(tempfile.mkdtemp(prefix="judge-interrupt-"))
    folder.chmod(0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


SLEEPER = _solution_101("import time\ntime.sleep(120)")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_command_line_judge_cleans_up(sig, scratch, tmp_path):
    path = tmp_path / "sleeper.py"
    path.write_text(SLEEPER)
    proc = subprocess.Popen([sys.executable, str(PRACTICE / "judge.py"), "101", str(path)],
                            env=_judge_env(scratch), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _wait_for_run(scratch)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) != 0
    assert _leftovers(scratch) == []


def test_interrupted_web_server_cleans_up(scratch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, str(PRACTICE / "judge.py"), "--serve", "--port",
                             str(port)], env=_judge_env(scratch), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    proc.stdout.readline()  # the server is listening

    def post() -> None:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/api/exercises/101/run", json.dumps({"code": SLEEPER}).encode(),
                         {"Content-Type": "application/json"})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            pass  # the server went down mid-answer: expected

    client = threading.Thread(target=post, daemon=True)
    client.start()
    _wait_for_run(scratch)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) != 0
    assert _leftovers(scratch) == []
