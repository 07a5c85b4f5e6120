"""Run N tensor-parallel ranks as processes on this machine (chapter 17's main and tests).

Each rank is a fresh interpreter (spawn) that joins a gloo (CPU) or NCCL (GPU) group over a free
loopback port. models/tp_logits.py runs the check of the whole chapter on them: a model's logits
at tp ranks, to compare with one rank's.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
from collections.abc import Callable


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_ranks(fn: Callable[..., None], tp: int, *args: object, timeout_s: float = 300.0) -> None:
    """Run fn(rank, tp, init_method, *args) in tp processes; raise if any of them fails."""
    init_method = f"tcp://127.0.0.1:{free_port()}"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=fn, args=(rank, tp, init_method, *args), name=f"tp-rank-{rank}")
             for rank in range(tp)]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + timeout_s
    try:
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.exitcode != 0:  # failed, or still running at the deadline
                state = "timed out" if proc.exitcode is None else f"exit code {proc.exitcode}"
                raise RuntimeError(f"{proc.name} failed ({state})")
    finally:
        for proc in procs:  # one failed rank leaves the others waiting in a collective
            if proc.is_alive():
                proc.kill()
                proc.join()

