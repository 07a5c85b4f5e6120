"""The sandbox supervisor: runs a learner's program, case by case, under limits.

The judge starts it as `python -I -S sandbox.py SPEC.json` (standard library only, single-threaded,
so forking here is safe even when the judge itself is a threaded web server). It

* becomes a child subreaper, so every process the learner's program starts, even one that calls
  setsid() and double-forks, stays in this process's tree and is found and killed at the end;
* starts the learner's program (the "harness", see harness_py.py) in its own session, as an
  unprivileged per-run uid when running as root, with rlimits and Landlock applied just before exec;
* reads JSON-lines events from a pipe ("ready", "start" i, "end" i, "finish") and enforces a
  wall-clock deadline per case; when the program crashes or overruns on case i, case i gets its
  verdict and a fresh program is started at case i + 1;
* kills and reaps the whole process tree after each program, and writes a JSON report.

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
import linux  # noqa: E402

MAX_EVENT_BYTES = 1 << 20  # per program; a flood of events ends the program
MAX_TEXT = 8000  # characters kept from any string in an event


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

    # ---- process tree -------------------------------------------------------------------------
    @staticmethod
    def _descendants() -> list[tuple[int, bool]]:
        """(pid, is_zombie) of every process below this one, read from /proc."""
        children: dict[int, list[tuple[int, bool]]] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2:].split()
            children.setdefault(int(fields[1]), []).append((int(name), fields[0] == b"Z"))
        found, todo = [], [os.getpid()]
        while todo:
            for pid, zombie in children.get(todo.pop(), []):
                found.append((pid, zombie))
                todo.append(pid)
        return found

    def _signal_tree(self) -> set[int]:
        live = {pid for pid, zombie in self._descendants() if not zombie}
        for pid in live:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return live

    def _clean_tree(self, main_pid: int, signalled: set[int]) -> int:
        """Kill and reap everything below us; return how many processes besides main_pid were
        alive (counting `signalled`, those already killed). Call after main_pid was waited for."""
        deadline = time.monotonic() + 10
        strays = signalled - {main_pid}
        while True:
            strays |= self._signal_tree() - {main_pid}
            while True:
                try:
                    pid, _ = os.waitpid(-1, os.WNOHANG)
                except ChildProcessError:
                    break
                if pid == 0:
                    break
            if not self._descendants() or time.monotonic() > deadline:
                return len(strays)
            time.sleep(0.005)

    # ---- one program --------------------------------------------------------------------------
    def _preexec(self) -> None:
        spec = self.spec
        cpu_hard = int(spec["cpu_total_s"])
        resource.setrlimit(resource.RLIMIT_CPU, (min(int(spec["startup_cpu_s"]), cpu_hard), cpu_hard))
        resource.setrlimit(resource.RLIMIT_AS, (spec["as_bytes"], spec["as_bytes"]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (spec["fsize_bytes"], spec["fsize_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (spec["nofile"], spec["nofile"]))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_NPROC, (spec["nproc"], spec["nproc"]))
        if spec.get("uid") is not None:
            linux.drop_to_user(spec["uid"], spec.get("keep_read_search", False))
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        if self.landlock:
            linux.restrict_filesystem(
                self.landlock, spec["read_dirs"], [spec["cwd"]], ["/dev/null"]
            )
        else:
            linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)

    def _open_output(self, key: str) -> int:
        return os.open(self.spec[key], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    def _run_program(self, start: int) -> int:
        """Run the program from case `start`; return the first case it did not finish (n when it
        finished them all). Fills self.results for every case it finished or failed on."""
        spec = self.spec
        self.programs += 1
        read_fd, write_fd = os.pipe()
        out_fd, err_fd = self._open_output("stdout"), self._open_output("stderr")
        try:
            proc = subprocess.Popen(
                [*spec["argv"], str(start), str(write_fd)],
                cwd=spec["cwd"], env=spec["env"], stdin=subprocess.DEVNULL,
                stdout=out_fd, stderr=err_fd, pass_fds=(write_fd,),
                start_new_session=True, preexec_fn=self._preexec,
            )
        except (OSError, subprocess.SubprocessError) as e:
            self.startup = {"status": "error", "message": f"无法启动沙箱进程：{e}"}
            return self.n
        finally:
            os.close(write_fd)
            os.close(out_fd)
            os.close(err_fd)
        os.set_blocking(read_fd, False)
        run = _ProgramRun(self, start)
        while run.failure is None:
            run.pump(read_fd, timeout=0.05)
            if proc.poll() is not None:
                run.pump(read_fd, timeout=0)  # events written just before exiting
                break
            if time.monotonic() > run.deadline:
                run.failure = {"status": "tle", "reason": "wall"}
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
        if failure is None:
            failure = _exit_failure(returncode, killed_by_us)
        if current is None:
            # The program died or stalled outside any case: before its first case (import) or
            # between cases. Before the first case there is nothing to retry.
            if not ready:
                if self.startup.get("status") != "import_error":
                    self.startup = {**failure, "status": "startup_" + failure["status"]}
                return self.n
            current = next_case
            self.results[current] = {"status": "running"}
        elapsed = time.monotonic() - case_start if case_start is not None else None
        self.results[current] = {**self.results[current], **failure, "wall_s": elapsed,
                                 "strays": strays}
        return current + 1

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
        }


class _ProgramRun:
    """What one program has reported so far, and when it must report next."""

    def __init__(self, supervisor: Supervisor, start: int):
        self.sup = supervisor
        self.ready = False
        self.current: int | None = None
        self.case_start: float | None = None
        self.next_case = start
        self.failure: dict | None = None
        self.buffer = b""
        self.total = 0
        self.eof = False
        self.deadline = time.monotonic() + float(supervisor.spec["startup_wall_s"])

    def pump(self, fd: int, timeout: float) -> None:
        if self.eof:
            time.sleep(timeout)
            return
        wait = max(0.0, min(self.deadline - time.monotonic(), timeout))
        readable, _, _ = select.select([fd], [], [], wait)
        while readable:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                self.eof = True
                break
            self.total += len(chunk)
            self.buffer += chunk
            if self.total > MAX_EVENT_BYTES:
                self.failure = {"status": "crashed", "message": "评测通道收到过多数据"}
                return
        *lines, self.buffer = self.buffer.split(b"\n")
        if len(self.buffer) > 65536:
            self.failure = {"status": "crashed", "message": "评测通道收到过长的一行"}
        for line in lines:
            self.handle(_parse_event(line))

    def handle(self, event: dict) -> None:
        sup, kind = self.sup, event.get("ev")
        case_wall = float(sup.spec["case_wall_s"])
        if kind == "ready" and not self.ready:
            self.ready = True
            sup.startup = {"status": "ok", "import_s": event.get("import_s")}
            self.deadline = time.monotonic() + case_wall
        elif kind == "import_error" and not self.ready:
            sup.startup = {**{k: v for k, v in event.items() if k != "ev"}, "status": "import_error"}
        elif kind == "start" and self.ready and self.current is None \
                and event.get("case") == self.next_case:
            self.current, self.case_start = self.next_case, time.monotonic()
            sup.results[self.current] = {"status": "running", **_offsets(event)}
            self.deadline = self.case_start + case_wall
        elif kind == "end" and self.current is not None and event.get("case") == self.current:
            result = {**sup.results[self.current], **event}
            result.pop("ev", None)
            sup.results[self.current] = result
            self.next_case, self.current = self.current + 1, None
            self.deadline = time.monotonic() + case_wall


def _offsets(event: dict) -> dict:
    return {k: event[k] for k in ("out_start", "err_start") if isinstance(event.get(k), int)}


def _parse_event(line: bytes) -> dict:
    try:
        event = json.loads(line)
    except ValueError:
        return {}
    if not isinstance(event, dict):
        return {}
    clean = {}
    for key, value in list(event.items())[:32]:
        if isinstance(value, str):
            value = value[:MAX_TEXT]
        elif isinstance(value, list):
            value = [v[:200] if isinstance(v, str) else v for v in value[:32]
                     if isinstance(v, (str, int, float))]
        elif not isinstance(value, (int, float, bool)) and value is not None:
            continue
        clean[str(key)[:64]] = value
    return clean


def _exit_failure(returncode: int, killed_by_us: bool) -> dict:
    if returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU:
            return {"status": "tle", "reason": "cpu"}
        if sig == signal.SIGXFSZ:
            return {"status": "output_limit"}
        if sig == signal.SIGKILL and killed_by_us:
            return {"status": "crashed", "signal": sig, "message": "被评测机终止"}
        return {"status": "crashed", "signal": sig, "message": signal.Signals(sig).name}
    return {"status": "exited", "exit_code": returncode}


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    signal.signal(signal.SIGTERM, _on_sigterm)
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
    tmp = spec["report"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, ensure_ascii=False)
    os.replace(tmp, spec["report"])


if __name__ == "__main__":
    main()
