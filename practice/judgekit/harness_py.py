"""Runs inside the sandbox, as the learner's process: calls the learner's function on each case.

Usage (by the supervisor): `python -I -B harness_py.py START EVENT_FD`, with cwd = the sandbox
folder holding job.json, inputs.safetensors, judge_codec.py and the learner's file. For case i it
emits {"ev": "start"} and {"ev": "end"} on EVENT_FD and writes the return value to out-i.json
(+ out-i.safetensors). Before each case it lowers the soft CPU limit to "used so far + the case's
limit", so an endless loop dies of SIGXCPU in that case, and the supervisor moves on to the next.
"""

import json
import math
import os
import resource
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
_OURS = ("harness_py.py", "harness_cuda.py", "judge_codec.py")
sys.path.insert(0, HERE)
import judge_codec as codec  # noqa: E402


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
        lines = traceback.format_exception(type(exc), exc, tb)
        text = "".join(lines)[-6000:]
    except Exception:
        text = message
    errno = getattr(exc, "errno", None)
    return {
        "exc_types": [c.__name__ for c in type(exc).__mro__],
        "exc_errno": errno if isinstance(errno, int) else None,
        "message": message[:2000],
        "traceback": text,
    }


def _size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return -1


class MissingEntry(Exception):
    judge_kind = "CE"


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def serve(load, call) -> None:
    """The case loop shared by every language. load(job) prepares what the cases call (raising
    SyntaxError means CE); call(target, job, i) runs case i and returns its value."""
    start, event_fd = int(sys.argv[1]), int(sys.argv[2])
    events = os.fdopen(event_fd, "w", buffering=1)
    pid = os.getpid()

    def emit(**event) -> None:
        events.write(json.dumps(event, ensure_ascii=False) + "\n")
        events.flush()

    with open("job.json", encoding="utf-8") as f:
        job = json.load(f)
    began = time.perf_counter()
    try:
        target = load(job)
    except SyntaxError as e:
        if os.getpid() == pid:
            emit(ev="import_error", kind="CE", message="".join(traceback.format_exception_only(e)))
        os._exit(0)
    except BaseException as e:
        if os.getpid() == pid:
            emit(ev="import_error", kind=getattr(e, "judge_kind", "RE"), **_describe(e))
        os._exit(0)
    if os.getpid() != pid:
        os._exit(0)
    emit(ev="ready", import_s=round(time.perf_counter() - began, 4))

    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    for i in range(start, len(job["cases"])):
        usage = resource.getrusage(resource.RUSAGE_SELF)
        soft = math.ceil(usage.ru_utime + usage.ru_stime + job["case_cpu_s"] + 0.5)
        if cpu_hard != resource.RLIM_INFINITY:
            soft = min(soft, cpu_hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu_hard))
        _flush()
        emit(ev="start", case=i, out_start=_size(1), err_start=_size(2))
        end = {"ev": "end", "case": i}
        try:
            cpu0, wall0 = time.process_time(), time.perf_counter()
            try:
                result, error = call(target, job, i), None
            except BaseException as e:
                result, error = None, e
            end["cpu_s"] = round(time.process_time() - cpu0, 6)
            end["wall_s"] = round(time.perf_counter() - wall0, 6)
            if os.getpid() != pid:
                os._exit(0)  # a process the learner forked: it must not report
            _flush()
            if error is not None:
                end.update(status="exception", **_describe(error))
            else:
                out_tensors: dict = {}
                data = codec.encode(result, out_tensors, prefix="o")
                with open(f"out-{i}.json", "w", encoding="utf-8") as f:
                    json.dump(data, f)
                if out_tensors:
                    codec.save_tensors(out_tensors, f"out-{i}.safetensors")
                end["status"] = "ok"
        except codec.EncodeError as e:
            end.update(status="bad_output", message=str(e)[:2000])
        except BaseException as e:
            if os.getpid() != pid:
                os._exit(0)
            end.update(status="exception", **_describe(e))
        end["rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        end["out_end"], end["err_end"] = _size(1), _size(2)
        emit(**end)
    emit(ev="finish")
    os._exit(0)


def _load(job: dict):
    tensors = {}
    if job["tensors"]:
        with open(job["tensors"], "rb") as f:
            tensors = codec.load_tensors(f.read())
    import importlib.util

    path = os.path.abspath(job["module_file"])
    spec = importlib.util.spec_from_file_location("solution", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["solution"] = module
    spec.loader.exec_module(module)
    fn = getattr(module, job["entry"], None)
    if not callable(fn):
        raise MissingEntry(f"{job['module_file']} 里没有函数 {job['entry']}")
    return fn, tensors


def _call(target, job: dict, i: int):
    fn, tensors = target
    return fn(**codec.decode(job["cases"][i], tensors))


if __name__ == "__main__":
    serve(_load, _call)
