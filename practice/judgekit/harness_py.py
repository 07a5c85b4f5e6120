"""Runs inside the sandbox: the harness (H), and the worker (W) it forks to run the learner's code.

Usage (by the supervisor): `python -I -B harness_py.py START EVENT_FD JOB_FD`. The cwd is the
sandbox folder (the learner's file, a scratch tmp/); this file and its helpers sit in a folder
the sandbox can read but not change. JOB_FD is the job file, opened by the supervisor: first a
setup message (what W loads), then one message per case (its inputs). EVENT_FD is the pipe to the
supervisor: "ready", "start" i, "end" i (+ the output), "lost" (W died), "finish".

Why two processes. Learner code can do anything its interpreter can: patch modules, walk gc for
objects, write to any descriptor number it holds, exit at any moment. So no evidence it shares a
process with can be trusted, and a secret (an HMAC key) kept in that process can be found. H never
imports or runs learner code. It forks W first, before it reads the cases, so W's memory holds no
input but the one it is asked about; W closes EVENT_FD and JOB_FD before it loads anything, and
cannot get them back: H is non-dumpable, so W (same uid, no capabilities, ptrace and
process_vm_*/pidfd_getfd denied by seccomp) can neither open /proc/H/fd/* nor read or write H's
memory; Landlock lets it write nothing outside the sandbox folder. Signals W sends to H can only
kill or stop H, which the supervisor sees as a crash or a timeout, never as AC.

What W sends back is the learner's answer to one question. For case i, H sends the inputs with a
fresh random nonce and accepts exactly one reply carrying that nonce and i; a reply written ahead
of the question (say, at import), for another case, malformed, or too big ends the program with
RE, and so does a second reply. A reply that learner code forges inside W for the current case
("raised ValueError") is the same thing as the learner's function raising ValueError: it is the
learner's answer and is judged as one. CPU time, memory and exit status are never taken from H or
W: the supervisor measures the process tree from outside.
"""

import builtins
import ctypes
import json
import os
import secrets
import select
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import frames  # noqa: E402

MAX_INPUT = 1 << 30  # the whole job file
MAX_OUTPUT = 32 << 20  # one case's reply
_OURS = ("harness_py.py", "harness_cuda.py", "judge_codec.py", "frames.py")
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4


def _prctl(option: int, value: int) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _type_name(cls: type) -> str:
    """A built-in exception by its bare name (what Case.raises names), any other class by module
    and qualified name: a learner's own class called ValueError is not ValueError."""
    if getattr(builtins, cls.__name__, None) is cls:
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def _describe(exc: BaseException) -> dict:
    try:
        text = str(exc)
    except Exception:
        text = ""
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    tb = exc.__traceback__
    while tb is not None and os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == HERE \
            and os.path.basename(tb.tb_frame.f_code.co_filename) in _OURS:
        tb = tb.tb_next  # hide the harness's own frames
    try:
        text = "".join(traceback.format_exception(type(exc), exc, tb))[-6000:]
    except Exception:
        text = message
    errno = getattr(exc, "errno", None)
    return {
        "exc_types": [_type_name(c) for c in type(exc).__mro__],
        "exc_errno": errno if isinstance(errno, int) else None,
        "message": message[:2000],
        "traceback": text,
    }


def _clean_exception(reply: dict) -> dict:
    """The exception fields of W's reply, typed and cut to size (it is untrusted text)."""
    types = reply.get("exc_types")
    types = [t[:200] for t in types[:32] if isinstance(t, str)] if isinstance(types, list) else []
    errno = reply.get("exc_errno")
    return {"exc_types": types, "exc_errno": errno if type(errno) is int else None,
            "message": str(reply.get("message", ""))[:2000],
            "traceback": str(reply.get("traceback", ""))[-6000:]}


class MissingEntry(Exception):
    judge_kind = "CE"


# ---- W: the worker, in the forked child ----------------------------------------------------------
def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _worker(load, call, setup: dict, requests_fd: int, replies_fd: int) -> None:
    keep = {0, 1, 2, requests_fd, replies_fd}
    for name in os.listdir("/proc/self/fd"):
        if int(name) not in keep:
            try:
                os.close(int(name))
            except OSError:
                pass
    pid = os.getpid()
    requests, replies = os.fdopen(requests_fd, "rb"), os.fdopen(replies_fd, "wb", buffering=0)

    def reply(header: dict, *payloads: bytes) -> None:
        if os.getpid() == pid:  # a process the learner forked must not answer
            replies.write(frames.pack(header, *payloads))

    try:
        target = load(setup)
    except SyntaxError as e:
        reply({"ev": "import_error", "kind": "CE",
               "message": "".join(traceback.format_exception_only(e))})
        os._exit(0)
    except BaseException as e:
        reply({"ev": "import_error", "kind": getattr(e, "judge_kind", "RE"), **_describe(e)})
        os._exit(0)
    reply({"ev": "loaded"})
    while True:
        message = frames.read(requests, MAX_INPUT)
        if message is None:
            os._exit(0)
        header, payloads = message
        answer = {"nonce": header["nonce"], "case": header["case"]}
        try:
            try:
                result = call(target, header, payloads)
            finally:
                _flush()
            import judge_codec as codec

            out_tensors: dict = {}
            data = json.dumps(codec.encode(result, out_tensors, prefix="o")).encode()
            blob = codec.dump_tensors(out_tensors) if out_tensors else b""
            reply({**answer, "status": "ok"}, data, blob)
        except BaseException as e:
            if os.getpid() != pid:
                os._exit(0)
            status = "bad_output" if type(e).__name__ == "EncodeError" else "exception"
            reply({**answer, "status": status, **_describe(e)})


# ---- H: the harness ------------------------------------------------------------------------------
class _Lost(Exception):
    """W is gone, or broke the protocol; carries the event for the supervisor."""

    def __init__(self, event: dict):
        self.event = event


def _exit_event(status: int) -> dict:
    if os.WIFSIGNALED(status):
        return {"ev": "lost", "signal": os.WTERMSIG(status)}
    return {"ev": "lost", "exit_code": os.WEXITSTATUS(status)}


class _Channel:
    """H's end of the pipes to W."""

    def __init__(self, pid: int, to_w: int, from_w: int):
        self.pid, self.to_w, self.from_w = pid, to_w, from_w
        self.reader = frames.Reader(MAX_OUTPUT)
        self.waiting: list = []
        self.status: int | None = None  # W's wait status once reaped

    def _read(self, timeout: float) -> bool:
        """Read what W wrote; False at end of file or when nothing came within timeout."""
        if not select.select([self.from_w], [], [], timeout)[0]:
            return False
        chunk = os.read(self.from_w, 1 << 20)
        try:
            self.waiting += self.reader.feed(chunk)
        except frames.FrameError as e:
            raise self.broken(str(e)) from None
        return bool(chunk)

    def _reaped(self) -> bool:
        if self.status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = status
        return self.status is not None

    def broken(self, why: str) -> _Lost:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return _Lost({"ev": "lost", "protocol": True, "message": f"评测通道收到无效的回复：{why}"})

    def send(self, header: dict, *payloads: bytes) -> None:
        data = frames.pack(header, *payloads)
        try:
            while data:
                data = data[os.write(self.to_w, data):]
        except BrokenPipeError:
            while not self._reaped():
                time.sleep(0.01)
            raise _Lost(_exit_event(self.status)) from None

    def receive(self) -> tuple[dict, list[bytes]]:
        """W's next message; raises _Lost when W exits first or talks out of turn."""
        while not self.waiting:
            if self._read(0.05):
                continue
            if self._reaped():
                while self._read(0):  # what it wrote just before exiting
                    pass
                if not self.waiting:
                    raise _Lost(_exit_event(self.status))
        if len(self.waiting) > 1 or not self.reader.idle:
            raise self.broken("一次提问收到了多个回复")
        return self.waiting.pop()

    def drain(self) -> None:
        """Anything W wrote that nobody asked for is a protocol violation."""
        self._read(0)
        if self.waiting or not self.reader.idle:
            raise self.broken("在提问之前就写了回复")


def _sizes(when: str) -> dict:
    """Where the case's stdout/stderr begin or end, measured by H at the moment the case starts
    or its reply arrives (W flushes before it replies): the supervisor reads the events later."""
    sizes = {}
    for fd, name in ((1, "out"), (2, "err")):
        try:
            sizes[f"{name}_{when}"] = os.fstat(fd).st_size
        except OSError:
            pass
    return sizes


def serve(load, call) -> None:
    """The harness's main: fork W (which loads with load(setup) and answers each case with
    call(target, header, payloads)), then ask it the cases from START on."""
    start, event_fd, job_fd = (int(a) for a in sys.argv[1:4])
    _prctl(PR_SET_DUMPABLE, 0)
    events = os.fdopen(event_fd, "wb", buffering=0)

    def emit(header: dict, *payloads: bytes) -> None:
        events.write(frames.pack(header, *payloads))

    job = os.fdopen(job_fd, "rb")
    setup, _ = frames.read(job, MAX_INPUT)
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    _flush()
    pid = os.fork()
    if pid == 0:
        try:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() == 1:
                os._exit(0)
            os.close(requests_w)
            os.close(replies_r)
            _worker(load, call, setup, requests_r, replies_w)
        finally:
            os._exit(0)
    os.close(requests_r)
    os.close(replies_w)
    cases = []
    while (message := frames.read(job, MAX_INPUT)) is not None:
        cases.append(message)
    job.close()
    w = _Channel(pid, requests_w, replies_r)
    began = time.perf_counter()
    try:
        header = w.receive()[0]
        if header.get("ev") == "import_error":
            kind = header.get("kind") if header.get("kind") in ("CE", "RE", "SE") else "RE"
            emit({"ev": "import_error", "kind": kind, **_clean_exception(header)})
            raise _Lost({"ev": "finish"})
        if header.get("ev") != "loaded":
            raise w.broken("没有先报告加载完成")
        emit({"ev": "ready", "import_s": round(time.perf_counter() - began, 4)})
        for i in range(start, len(cases)):
            w.drain()
            nonce = secrets.token_hex(16)
            emit({"ev": "start", "case": i, **_sizes("start")})
            inputs, payloads = cases[i]
            w.send({**inputs, "case": i, "nonce": nonce}, *payloads)
            reply, outputs = w.receive()
            if reply.get("nonce") != nonce or reply.get("case") != i:
                raise w.broken("回复的不是这一次提问")
            status = reply.get("status")
            if status == "ok" and len(outputs) == 2:
                emit({"ev": "end", "case": i, "status": "ok", **_sizes("end")}, *outputs)
            elif status in ("exception", "bad_output"):
                emit({"ev": "end", "case": i, "status": status, **_sizes("end"),
                      **_clean_exception(reply)})
            else:
                raise w.broken("回复的格式不对")
        emit({"ev": "finish"})
    except _Lost as lost:
        if lost.event.get("ev") != "finish":
            emit(lost.event)
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        # Reap W before H exits: a W with large libraries mapped (triton's) takes a moment to die,
        # and one still alive when the supervisor sweeps the tree would be reported as a stray.
        if w.status is None:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
    os._exit(0)


# ---- the Python language: W imports the learner's module and calls its function ------------------
def _load(setup: dict):
    import importlib.util

    path = os.path.abspath(setup["module_file"])
    spec = importlib.util.spec_from_file_location("solution", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["solution"] = module
    spec.loader.exec_module(module)
    fn = getattr(module, setup["entry"], None)
    if not callable(fn):
        raise MissingEntry(f"{setup['module_file']} 里没有函数 {setup['entry']}")
    return fn


def _call(fn, header: dict, payloads: list[bytes]):
    import judge_codec as codec

    data, blob = payloads
    tensors = codec.load_tensors(blob) if blob else {}
    return fn(**codec.decode(json.loads(data), tensors))


if __name__ == "__main__":
    serve(_load, _call)
