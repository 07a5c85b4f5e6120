"""The sandbox supervisor: runs a learner's program, case by case, under limits.

The judge starts it as `python -I -S sandbox.py SPEC.json` (standard library only, single-threaded,
so forking here is safe even when the judge itself is a threaded web server). It runs as the
judge's user (root in CI) and it never opens, follows or trusts a path the sandbox can change:
the program's stdout/stderr files, the job file and the results live in the judge's run folder,
which the sandboxed uid cannot write (and, under Landlock, not even read); the program gets them
as open descriptors. It

* becomes a child subreaper, so every process the learner's program starts, even one that calls
  setsid() and double-forks, stays in this process's tree and is found and killed at the end;
* starts the harness (harness_py.py) in its own session, as an unprivileged per-run uid with no
  capabilities when running as root, in fresh mount/network/IPC/UTS namespaces, with rlimits,
  Landlock and a seccomp filter applied just before exec;
* moves the program, before exec, into the run's control groups (cgroup.py; made by the judge):
  the kernel then counts the CPU time of every process the program ever starts, even children
  that exit unseen and are reaped by the kernel (SIGCHLD ignored), and limits the memory of all
  of them together;
* reads the harness's messages from a pipe ("ready", "start" i, "end" i + the output, "lost",
  "finish"), writes each case's output into the results folder, and enforces per case a CPU
  limit, a memory limit and a wall-clock deadline itself: CPU time is the control group's (or,
  where no group could be made, the process tree's, read from /proc and from this process's
  reaped children), never a number the program reports; a case during which the kernel killed a
  process for the group's memory limit is MLE; the wall-clock deadline always applies; when the
  program crashes or overruns on case i, case i gets its verdict and a fresh program starts at
  case i + 1;
* kills and reaps the whole process tree (and everything in the groups) after each program, and
  writes a JSON report.

It never looks at what the learner's outputs mean: the judge compares them, in its own process.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cgroup  # noqa: E402
import frames  # noqa: E402
import linux  # noqa: E402
import seccomp  # noqa: E402

MAX_OUTPUT = 32 << 20  # one case's output (the harness enforces the same)
CPU_SLACK_S = 0.25  # the tree may run this much past a case's CPU limit before it is killed
POLL_S = 0.1
_TICK = os.sysconf("SC_CLK_TCK")
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


class Terminated(Exception):
    """The judge asked us to stop (SIGTERM), or it died (parent-death signal)."""


def _on_sigterm(signum, frame):
    raise Terminated()


class Supervisor:
    def __init__(self, spec: dict):
        self.spec = spec
        self.n = int(spec["num_cases"])
        self.results: list[dict | None] = [None] * self.n
        self.startup: dict = {"status": "ok"}
        self.stray_killed = 0
        self.programs = 0
        self.landlock = linux.landlock_abi() if spec.get("landlock", True) else 0
        self.groups = cgroup.RunGroups.from_json(spec.get("cgroups"))
        self.meter = cgroup.Meter(self.groups)
        self.join_fds = self.meter.join_fds()
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | _OPEN_FLAGS
        self.out_fd = os.open(spec["stdout"], flags, 0o600)
        self.err_fd = os.open(spec["stderr"], flags, 0o600)

    # ---- process tree -------------------------------------------------------------------------
    @staticmethod
    def _descendants() -> list[tuple[int, bool, int]]:
        """(pid, is_zombie, CPU ticks incl. reaped children) of every process below this one."""
        children: dict[int, list[tuple[int, bool, int]]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            ticks = sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
            children.setdefault(int(fields[1]), []).append((int(name), fields[0] == b"Z", ticks))
        found, todo = [], [os.getpid()]
        while todo:
            for entry in children.get(todo.pop(), []):
                found.append(entry)
                todo.append(entry[0])
        return found

    def tree_cpu(self) -> float:
        """CPU seconds used so far by everything this supervisor started: the control group's
        count when there is one; else live processes (with the children they reaped) plus the
        processes this one reaped, which misses children reaped by the kernel."""
        counted = self.meter.cpu_s()
        if counted is not None:
            return counted
        own = resource.getrusage(resource.RUSAGE_CHILDREN)
        return sum(t for _, _, t in self._descendants()) / _TICK + own.ru_utime + own.ru_stime

    def peak_mb(self) -> float:
        """The memory peak since the last reset: of the whole group, or else the largest
        resident set of any one process now alive."""
        peak = self.meter.peak_bytes()
        if peak is not None:
            return round(peak / (1 << 20), 1)
        return self.tree_rss_mb()

    def group_peak_mb(self) -> float | None:
        """The group's peak; None without a memory group (the processes are gone by now)."""
        return self.peak_mb() if self.groups.memory is not None else None

    def tree_rss_mb(self) -> float:
        peak = 0
        for pid, _, _ in self._descendants():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("VmHWM:"):
                            peak = max(peak, int(line.split()[1]))
            except (OSError, ValueError):
                pass
        return round(peak / 1024, 1)

    def _signal_tree(self) -> set[int]:
        live = {pid for pid, zombie, _ in self._descendants() if not zombie}
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return live

    def _clean_tree(self, main_pid: int, signalled: set[int]) -> int:
        """Kill and reap everything below us and everything in the run's groups; return how
        many processes besides main_pid were alive (counting `signalled`, those already
        killed). Call after main_pid was waited for."""
        deadline = time.monotonic() + 10
        strays = signalled - {main_pid}
        while True:
            strays |= set(self.meter.members()) - {main_pid}
            self.meter.kill_all()
            strays |= self._signal_tree() - {main_pid}
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
            if (not self._descendants() and not self.meter.members()) \
                    or time.monotonic() > deadline:
                return len(strays)
            time.sleep(0.005)

    # ---- one program --------------------------------------------------------------------------
    def _preexec(self) -> None:
        spec = self.spec
        for fd in self.join_fds:  # first, while still root: everything it starts stays inside
            os.write(fd, str(os.getpid()).encode())
        cpu_hard = int(spec["cpu_total_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu_hard, cpu_hard + 1))
        resource.setrlimit(resource.RLIMIT_AS, (spec["as_bytes"], spec["as_bytes"]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize_bytes"], spec["fsize_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (spec["nofile"], spec["nofile"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (spec["nproc"], spec["nproc"]))
        if spec.get("uid") is not None:
            linux.isolate(spec["read_dirs"])
            linux.drop_to_user(spec["uid"])
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        if self.landlock:
            linux.restrict_filesystem(
                self.landlock, spec["read_dirs"], [spec["cwd"]], ["/dev/null"]
            )
        seccomp.install()

    def _sizes(self) -> dict:
        return {"out": os.fstat(self.out_fd).st_size, "err": os.fstat(self.err_fd).st_size}

    def _run_program(self, start: int) -> int:
        """Run the program from case `start`; return the first case it did not finish (n when it
        finished them all). Fills self.results for every case it finished or failed on."""
        spec = self.spec
        self.programs += 1
        read_fd, write_fd = os.pipe()
        job_fd = os.open(spec["job"], os.O_RDONLY | _OPEN_FLAGS)
        try:
            proc = subprocess.Popen(
                [*spec["argv"], str(start), str(write_fd), str(job_fd)],
                cwd=spec["cwd"], env=spec["env"], stdin=subprocess.DEVNULL,
                stdout=self.out_fd, stderr=self.err_fd, pass_fds=(write_fd, job_fd),
                start_new_session=True, preexec_fn=self._preexec,
            )
        except (OSError, subprocess.SubprocessError) as e:
            self.startup = {"status": "error", "message": f"无法启动沙箱进程：{e}"}
            return self.n
        finally:
            os.close(write_fd)
            os.close(job_fd)
        os.set_blocking(read_fd, False)
        run = _ProgramRun(self, start)
        while run.failure is None:
            run.pump(read_fd, timeout=POLL_S)
            if proc.poll() is not None:
                run.pump(read_fd, timeout=0)  # messages written just before exiting
                break
            run.check_limits()
        ready, current, case_start = run.ready, run.current, run.case_start
        next_case, failure = run.next_case, run.failure

        killed_by_us = proc.poll() is None
        signalled = self._signal_tree()
        returncode = proc.wait()
        strays = self._clean_tree(proc.pid, signalled)
        self.stray_killed += strays
        os.close(read_fd)

        if next_case >= self.n:
            return self.n
        if run.over_memory():  # the kernel killed a process of the group: that is the cause
            failure = run.memory_failure()
        if failure is None:
            failure = run.lost or _exit_failure(returncode, killed_by_us)
        if current is None:
            # The program died or stalled outside any case: before its first case (import) or
            # between cases. Before the first case there is nothing to retry.
            if not ready:
                if self.startup.get("status") != "import_error":
                    self.startup = {**failure, "status": "startup_" + failure["status"]}
                return self.n
            current = next_case
            self.results[current] = {"status": "running", **run.offsets()}
        elapsed = time.monotonic() - case_start if case_start is not None else None
        self.results[current] = {**self.results[current], **failure, "wall_s": elapsed,
                                 "strays": strays, **run.ends(), "cpu_s": run.case_cpu(),
                                 "rss_mb": self.group_peak_mb()}
        return current + 1

    def _save_output(self, case: int, payloads: list[bytes]) -> None:
        for suffix, data in zip((".json", ".safetensors"), payloads):
            if suffix == ".json" or data:
                path = os.path.join(self.spec["results"], f"out-{case}{suffix}")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _OPEN_FLAGS, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)

    def run(self) -> dict:
        start, max_timeouts = 0, int(self.spec.get("max_timeouts", 2))
        while start < self.n:
            start = self._run_program(start)
            if sum(r is not None and r.get("status") == "tle" for r in self.results) >= max_timeouts:
                for i in range(start, self.n):
                    self.results[i] = {"status": "skipped"}
                break
        return {
            "startup": self.startup,
            "cases": [r if r is not None else {"status": "not_run"} for r in self.results],
            "programs": self.programs,
            "stray_killed": self.stray_killed,
            "landlock_abi": self.landlock,
            "cpu_accounting": self.groups.cpu_accounting,
            "memory_accounting": self.groups.memory_accounting,
        }


class _ProgramRun:
    """What one program has reported so far, and the limits it runs against."""

    def __init__(self, supervisor: Supervisor, start: int):
        self.sup = supervisor
        self.ready = False
        self.current: int | None = None
        self.case_start: float | None = None
        self.next_case = start
        self.failure: dict | None = None
        self.lost: dict | None = None
        self.reader = frames.Reader(MAX_OUTPUT + (1 << 20))
        self.eof = False
        self.deadline = time.monotonic() + float(supervisor.spec["startup_wall_s"])
        self.cpu_limit = float(supervisor.spec["startup_cpu_s"])
        self.cpu_base = supervisor.tree_cpu()
        self.oom_base = supervisor.meter.oom_kills()
        supervisor.meter.reset_peak()

    def offsets(self) -> dict:
        sizes = self.sup._sizes()
        return {"out_start": sizes["out"], "err_start": sizes["err"]}

    def ends(self) -> dict:
        sizes = self.sup._sizes()
        return {"out_end": sizes["out"], "err_end": sizes["err"]}

    def case_cpu(self) -> float:
        """CPU seconds since the last case ended (or the program became ready): what the
        program did between cases counts towards the next case."""
        return round(self.sup.tree_cpu() - self.cpu_base, 3)

    def over_memory(self) -> bool:
        """Did the kernel kill a process of the group for its memory limit since the case (or
        the program) began?"""
        return self.sup.meter.oom_kills() > self.oom_base

    def memory_failure(self) -> dict:
        return {"status": "mle", "rss_mb": self.sup.group_peak_mb(),
                "limit_mb": self.sup.groups.memory_bytes >> 20}

    def check_limits(self) -> None:
        if self.over_memory():
            self.failure = self.memory_failure()
        elif time.monotonic() > self.deadline:
            self.failure = {"status": "tle", "reason": "wall"}
        elif self.case_cpu() > self.cpu_limit + CPU_SLACK_S:
            self.failure = {"status": "tle", "reason": "cpu"}

    def pump(self, fd: int, timeout: float) -> None:
        if self.eof:
            time.sleep(timeout)
            return
        wait = max(0.0, min(self.deadline - time.monotonic(), timeout))
        readable, _, _ = select.select([fd], [], [], wait)
        messages = []
        while readable:
            try:
                chunk = os.read(fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            try:
                messages += self.reader.feed(chunk)
            except frames.FrameError as e:
                self.failure = {"status": "crashed", "message": f"评测通道出错：{e}"}
                return
        for header, payloads in messages:
            self.handle(header, payloads)

    def handle(self, event: dict, payloads: list[bytes]) -> None:
        sup, kind = self.sup, event.get("ev")
        case_wall = float(sup.spec["case_wall_s"])
        if kind == "ready" and not self.ready:
            self.ready = True
            sup.startup = {"status": "ok", "import_s": event.get("import_s")}
            self._next_case_limits(case_wall)
        elif kind == "import_error" and not self.ready:
            sup.startup = {**_clean(event), "status": "import_error"}
        elif kind == "start" and self.ready and self.current is None \
                and event.get("case") == self.next_case:
            self.current, self.case_start = self.next_case, time.monotonic()
            sup.results[self.current] = {"status": "running", **self.offsets(),
                                         **_sizes(event, "start")}
        elif kind == "end" and self.current is not None and event.get("case") == self.current:
            result = {**sup.results[self.current], **_clean(event), **self.ends(),
                      **_sizes(event, "end"), "cpu_s": self.case_cpu(),
                      "rss_mb": sup.peak_mb()}
            if self.over_memory():  # a process of the group was killed, even if not this one
                result = {**result, **self.memory_failure()}
            if result.get("status") == "ok":
                if len(payloads) != 2:
                    result = {**result, "status": "crashed", "message": "评测通道出错：没有输出"}
                else:
                    sup._save_output(self.current, payloads)
            sup.results[self.current] = result
            self.next_case, self.current = self.current + 1, None
            self._next_case_limits(case_wall)
        elif kind == "lost":
            self.lost = _lost_failure(event)

    def _next_case_limits(self, case_wall: float) -> None:
        self.deadline = time.monotonic() + case_wall
        self.cpu_base = self.sup.tree_cpu()
        self.cpu_limit = float(self.sup.spec["case_cpu_s"])
        self.oom_base = self.sup.meter.oom_kills()
        self.sup.meter.reset_peak()


_EVENT_KEYS = ("status", "exc_types", "exc_errno", "message", "traceback", "kind", "import_s")


def _sizes(event: dict, when: str) -> dict:
    """The stdout/stderr offsets the harness measured when it sent the event (ours, measured
    when we read it, may already include later cases' output)."""
    return {f"{name}_{when}": event[f"{name}_{when}"] for name in ("out", "err")
            if type(event.get(f"{name}_{when}")) is int}


def _clean(event: dict) -> dict:
    return {k: event[k] for k in _EVENT_KEYS if k in event}


def _lost_failure(event: dict) -> dict:
    """The harness's word on how the worker ended (the harness is trusted; the worker is not)."""
    if event.get("protocol"):
        return {"status": "crashed", "message": str(event.get("message"))}
    if isinstance(event.get("signal"), int):
        return _exit_failure(-event["signal"], False)
    if isinstance(event.get("exit_code"), int):
        return {"status": "exited", "exit_code": event["exit_code"]}
    return {"status": "crashed", "message": str(event.get("message"))}


def _exit_failure(returncode: int, killed_by_us: bool) -> dict:
    if returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU:
            return {"status": "tle", "reason": "cpu"}
        if sig == signal.SIGXFSZ:
            return {"status": "output_limit"}
        if sig == signal.SIGKILL and killed_by_us:
            return {"status": "crashed", "signal": sig, "message": "被评测机终止"}
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return {"status": "crashed", "signal": sig, "message": name}
    return {"status": "exited", "exit_code": returncode}


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    signal.signal(signal.SIGTERM, _on_sigterm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the judge, which sends SIGTERM
    linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)
    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != spec["judge_pid"]:
        return  # the judge is already gone
    supervisor = Supervisor(spec)
    try:
        report = supervisor.run()
    except Terminated:
        supervisor._clean_tree(-1, supervisor._signal_tree())
        raise SystemExit(1) from None
    finally:
        supervisor.meter.close()
    tmp = spec["report"] + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _OPEN_FLAGS, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(report, f, ensure_ascii=False)
    os.replace(tmp, spec["report"])


if __name__ == "__main__":
    main()
