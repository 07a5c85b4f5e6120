"""Chapter 14: the launcher starts, watches and stops every process of the server."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest
from conftest import RunningServer

from minisgl.utils.mp import private_ipc_dir, remove_stale_ipc_dirs

SMALL = ["--num-pages", "512", "--max-seq-len", "512", "--max-running-requests", "8"]


def family(server: RunningServer) -> list[psutil.Process]:
    launcher = psutil.Process(server.proc.pid)
    return [launcher, *launcher.children(recursive=True)]


def wait_gone(procs: list[psutil.Process], timeout: float = 30.0) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    return alive


def ipc_folders_of(procs: list[psutil.Process]) -> set[str]:
    """The private ipc folders the processes have sockets in."""
    folders = set()
    for proc in procs:
        for conn in proc.net_connections(kind="unix"):
            if conn.laddr and "minisgl-" in conn.laddr:
                folders.add(os.path.dirname(conn.laddr))
    return folders


def open_stream(server: RunningServer, path: str, body: dict) -> http.client.HTTPResponse:
    """Start a long streaming request; returns once its first event has arrived."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    if path == "/generate":  # SGLang's body: the sampling fields in sampling_params
        body = {"text": body["text"], "sampling_params": {
            "max_new_tokens": body["max_tokens"], "ignore_eos": True}}
    else:
        body = {**body, "ignore_eos": True}
    conn.request("POST", path, body=json.dumps({**body, "stream": True}),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")
    return resp


def test_sigterm_under_load_ends_streams_cleanly_and_every_worker_by_itself(smollm2_dir):
    """SIGTERM while 4 streams run: each stream gets an error event and [DONE], every process
    ends by itself (none is killed for missing the stop deadline), the socket folder is removed
    and the log has no traceback."""
    server = RunningServer(["--model", str(smollm2_dir), "--num-tokenizer", "2", *SMALL])
    procs = family(server)
    names = {p.pid for p in procs}
    assert len(procs) >= 5  # launcher, scheduler, detokenizer, two tokenizers
    folders = ipc_folders_of(procs)
    assert folders and all(os.stat(f).st_mode & 0o777 == 0o700 for f in folders)
    assert server.post("/v1/completions", {"prompt": "Hi", "max_tokens": 2})[0] == 200
    streams = [open_stream(server, "/v1/completions", {"prompt": "Once upon", "max_tokens": 400}),
               open_stream(server, "/v1/chat/completions", {"max_tokens": 400, "messages": [
                   {"role": "user", "content": "Tell me a long story."}]}),
               open_stream(server, "/generate", {"text": "One, two,", "max_tokens": 400}),
               open_stream(server, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 400})]
    server.proc.send_signal(signal.SIGTERM)
    for resp in streams:
        events = [e for e in resp.read().split(b"\n\n") if e]
        assert events[-1] == b"data: [DONE]"
        error = json.loads(events[-2][len(b"data: "):])
        assert error["error"]["message"] == "the server is shutting down"
        assert error["error"]["type"] == "server_error"
    assert server.proc.wait(60) == 0
    assert wait_gone(procs) == [], f"left behind: {names}"
    assert not any(os.path.exists(f) for f in folders)
    log = server.log_text()
    # every worker ended on SIGTERM itself: the launcher kills one that is still alive 10 s
    # later and says so (a worker that handled SIGTERM in Python missed it under load once)
    assert "did not stop in time" not in log, log
    assert "Traceback" not in log and "Exception ignored" not in log and "ZMQError" not in log


def test_loopback_by_default_and_a_kv_pool_smaller_than_the_context(smollm2_dir):
    server = RunningServer(["--model", str(smollm2_dir), "--num-pages", "120",
                            "--max-seq-len", "512"])
    try:
        listening = [c.laddr for c in psutil.Process(server.proc.pid).net_connections("inet")
                     if c.status == psutil.CONN_LISTEN]
        assert listening == [("127.0.0.1", server.port)]
        # No max_tokens: the answer may use what the 120-slot pool leaves, not the context's 512.
        status, body = server.post("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Hi"}], "ignore_eos": True})
        assert status == 200, body
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["total_tokens"] == 120
    finally:
        server.stop()


def test_a_dead_worker_brings_the_whole_server_down(smollm2_dir):
    server = RunningServer(["--model", str(smollm2_dir), *SMALL])
    procs = family(server)
    scheduler = next(p for p in procs[1:] if "resource_tracker" not in " ".join(p.cmdline())
                     and p.memory_info().rss == max(q.memory_info().rss for q in procs[1:]))
    scheduler.kill()  # the biggest worker holds the model: the scheduler
    assert server.proc.wait(60) == 1  # non-zero: the server did not stop by request
    assert wait_gone(procs) == []
    assert "exited unexpectedly" in server.log_text()


def test_a_killed_launcher_takes_its_workers_with_it(smollm2_dir, tmp_path, monkeypatch):
    """kill -9 leaves the launcher's socket folder behind; the next launcher removes it (the
    same call it makes at start-up), and never the folder of a launcher that is alive.

    The folders live in a temporary directory of this test's own (TMPDIR): any launcher that
    starts meanwhile, a test of another chapter run beside this one, cleans the shared /tmp and
    would remove the killed launcher's folder before this test looks."""
    server = RunningServer(["--model", str(smollm2_dir), *SMALL], env={"TMPDIR": str(tmp_path)})
    procs = family(server)
    folders = ipc_folders_of(procs)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = private_ipc_dir()  # this test process plays a live launcher
    try:
        server.proc.kill()  # SIGKILL: no handler runs, no cleanup code
        server.proc.wait(60)
        assert wait_gone(procs[1:]) == []
        assert folders and all(os.path.dirname(f) == str(tmp_path) for f in folders)
        assert all(os.path.isdir(f) for f in folders)
        removed = remove_stale_ipc_dirs(tmp_path)
        assert {str(f) for f in removed} >= folders
        assert not any(os.path.exists(f) for f in folders) and live.is_dir()
    finally:
        live.rmdir()


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "minisgl", *args], capture_output=True,
                          text=True, timeout=timeout)


def test_port_in_use_is_one_clear_error_before_loading(smollm2_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        start = time.monotonic()
        result = run_cli("--model", str(smollm2_dir), "--port", str(port))
    assert result.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "engine ready" not in result.stderr  # the model was never loaded
    assert time.monotonic() - start < 60


@pytest.mark.parametrize(("args", "message", "code"), [
    (["--model", "/no/such/folder"], "error: ", 1),  # not a flag's form: a model not found
    (["--port", "70000"], "port must be in 1..65535", 2),
    (["--tp", "2"], "tensor parallelism arrives in chapter 17", 2),
    (["--num-tokenizer", "0"], "num_tokenizer must be >= 1", 2),
    (["--max-body-bytes", "0"], "max_body_bytes must be >= 1", 2),
    (["--body-timeout", "0"], "body_timeout must be finite and > 0 seconds", 2),
    (["--body-timeout", "nan"], "body_timeout must be finite and > 0 seconds", 2),
    (["--device", "warp-drive"], "--device warp-drive: not a device name", 2),
    (["--device", "mps"], "only cuda and cpu are supported", 2),
])
def test_bad_flags_are_one_line_errors(args, message, code, smollm2_dir):
    if "--model" not in args:
        args = ["--model", str(smollm2_dir), *args]
    result = run_cli(*args)
    assert result.returncode == code
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_cuda_without_cuda_fails_before_loading(smollm2_dir):
    """--device cuda on a machine without CUDA: one line, exit code 2, nothing loaded."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    for device in ("cuda", "cuda:1"):
        start = time.monotonic()
        result = run_cli("--model", str(smollm2_dir), "--device", device)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip() == (f"error: --device {device}: CUDA is not available on "
                                         f"this machine (torch {torch.__version__}); use --device "
                                         f"cpu")
        assert time.monotonic() - start < 60  # no model load, no worker process
