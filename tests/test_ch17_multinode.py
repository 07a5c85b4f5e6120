"""Chapter 17: tensor-parallel ranks on two machines, as two launchers on this one (loopback).

Node 0 (`--node-rank 0`) runs the HTTP server, the tokenizer, the detokenizer and rank 0; node 1
runs rank 1 only. They meet at `--dist-init-addr 127.0.0.1:PORT` (torch.distributed's rendezvous)
and rank 0 sends its messages to rank 1 over tcp://127.0.0.1:PORT+1. The tiny random Qwen3 of
test_ch17_tp_serving answers one greedy chat, which must equal the offline LLM's answer at one rank
(TP=2 and TP=1 logits agree to ~1e-6 in fp32, far below the gap between the two best tokens).

Stopping or losing either node stops the other: each launcher sees only its own processes, and the
link between rank 0 and rank 1 carries the news across (scheduler/tp.py, watch_other_nodes).
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil
import pytest
import test_ch17_tp_serving
from conftest import RunningServer
from test_ch17_tp_serving import SMALL, family, titles

from minisgl.core import SamplingParams

tiny_qwen3_dir = test_ch17_tp_serving.tiny_qwen3_dir  # the same fixture: one folder per module

LATE_S = 3.0  # node 1 starts this long after node 0
STOP_S = 60.0  # outer bound on a stop: the events (exits, links closed) are what the tests check
QUESTION = [{"role": "user", "content": "Hi!"}]
MAX_TOKENS = 8


class Node:
    """`python -m minisgl` of a node other than 0: it serves no HTTP, so there is no /health to
    wait for (its rank is up once node 0 is healthy)."""

    def __init__(self, args: list[str]) -> None:
        self.args = args
        self.log = tempfile.NamedTemporaryFile("w+", prefix="minisgl-node-", suffix=".log")
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "minisgl", *self.args],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def log_text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # only after a failed test: its rank follows it (PR_SET_PDEATHSIG)
            self.proc.wait()


def rendezvous_port() -> int:
    """A port P with P and P+1 free: the rendezvous on P, rank 0's link to rank 1 on P+1. Taken
    below Linux's ephemeral ports (32768..), where the ranks' own connections get their ports."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        if all(_is_free(port + i) for i in range(2)):
            return port
    raise RuntimeError("no two free neighbouring ports in 20000..32000")


def _is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def node_args(folder, node_rank: int, port: int) -> list[str]:
    return ["--model", str(folder), "--tp", "2", "--nnodes", "2", "--node-rank", str(node_rank),
            "--dist-init-addr", f"127.0.0.1:{port}", *SMALL]


@pytest.fixture(scope="module")
def offline_answer(tiny_qwen3_dir):
    """The greedy answer of the offline LLM at one rank, in this process (before any server runs,
    so that they do not share the CPU)."""
    from minisgl.llm import LLM

    llm = LLM(str(tiny_qwen3_dir), num_pages=2048, max_seq_len=512)
    try:
        ids = llm.tokenizer.apply_chat_template(QUESTION)
        return llm.generate([ids], SamplingParams(max_tokens=MAX_TOKENS), use_tqdm=False)[0]
    finally:
        llm.shutdown()


def test_two_launchers_serve_one_model_and_stop_together(tiny_qwen3_dir, offline_answer):
    from openai import OpenAI

    port = rendezvous_port()
    node1 = Node(node_args(tiny_qwen3_dir, 1, port))
    late = threading.Timer(LATE_S, node1.start)  # node 0's rank 0 must wait for it
    late.start()
    node0 = None
    try:
        start = time.monotonic()
        node0 = RunningServer(node_args(tiny_qwen3_dir, 0, port))
        assert time.monotonic() - start >= LATE_S  # not healthy before its rank 1 existed
        assert "scheduler-rank0: waiting for the other nodes' ranks" in node0.log_text()
        procs0, procs1 = family(node0), family(node1)
        assert {"minisgl::api-server", "minisgl::scheduler-rank0", "minisgl::tokenizer-0",
                "minisgl::detokenizer"} <= set(titles(procs0))
        assert "minisgl::scheduler-rank1" not in titles(procs0)
        names1 = [t for t in titles(procs1) if t.startswith("minisgl::")]
        assert sorted(names1) == ["minisgl::node1", "minisgl::scheduler-rank1"]  # no frontend

        # A stray connection to rank 0's link port is not a rank, and must not stop anything.
        with socket.create_connection(("127.0.0.1", port + 1)) as stray:
            stray.sendall(b"GET / HTTP/1.1\r\n\r\n")
        client = OpenAI(base_url=f"{node0.base_url}/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(model=node0.model_name, messages=QUESTION,
                                               max_tokens=MAX_TOKENS, temperature=0)
        assert reply.usage.completion_tokens == len(offline_answer["token_ids"]) == MAX_TOKENS
        assert reply.choices[0].message.content == offline_answer["text"]

        assert node0.stop() == 0  # SIGTERM: a requested stop
        # Node 1 cannot tell a stop of node 0 from its death: its rank loses rank 0's link
        assert node1.proc.wait(STOP_S) == 1
        _, alive = psutil.wait_procs(procs0 + procs1, timeout=STOP_S)
        assert alive == []
        assert "the link to scheduler-rank0 on node 0 closed" in node1.log_text()
    finally:
        late.cancel()
        if node0 is not None:
            node0.stop()
        node1.stop()


def test_sigkill_of_node1_stops_node0_naming_the_rank(tiny_qwen3_dir):
    port = rendezvous_port()
    node1 = Node(node_args(tiny_qwen3_dir, 1, port))
    node1.start()
    node0 = None
    try:
        node0 = RunningServer(node_args(tiny_qwen3_dir, 0, port))
        status, _ = node0.post("/generate", {"text": "Hi", "sampling_params":
                                             {"max_new_tokens": 2, "temperature": 0}})
        assert status == 200  # serving, with both ranks
        procs = family(node0) + family(node1)
        node1.proc.send_signal(signal.SIGKILL)  # the launcher: the kernel then ends its rank
        assert node0.proc.wait(STOP_S) == 1  # non-zero: not a requested stop
        _, alive = psutil.wait_procs(procs, timeout=STOP_S)
        assert alive == []
        log = node0.log_text()
        assert "the link to scheduler-rank1 on node 1 closed" in log
        assert "scheduler-rank0 exited unexpectedly" in log
    finally:
        if node0 is not None:
            node0.stop()
        node1.stop()


def test_rank0_gives_up_with_a_clear_error_when_the_other_ranks_never_come():
    """The launchers wait TIMEOUT_S (600 s) for a late node; here the same wait, cut to 2 s."""
    port = rendezvous_port()
    code = ("from minisgl.distributed import init_tp\n"
            f"init_tp(0, 2, 'tcp://127.0.0.1:{port}', 'cpu', timeout_s=2)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert (f"RuntimeError: rank 0 of 2 could not meet the other ranks at tcp://127.0.0.1:{port} "
            "(waiting at most 2 s; is every rank started, with this address?)") in done.stderr
