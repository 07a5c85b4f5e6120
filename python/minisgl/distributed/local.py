"""Run N tensor-parallel ranks as processes on this machine (chapter 17's main and tests).

Each rank is a fresh interpreter (spawn) that joins a gloo (CPU) or NCCL (GPU) group over a free
loopback port. Results travel back as safetensors files, never pickles. `tp_logits` is the check
of the whole chapter: a model's logits at tp ranks, to compare with one rank's.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


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


def _logits_rank(rank: int, tp: int, init_method: str, cases: list[tuple[str, list[int]]],
                 out: str) -> None:
    from minisgl.models.weight import load_model

    from .comm import destroy_tp, init_tp

    init_tp(rank, tp, init_method, "cpu")
    try:
        results = {}
        for i, (model_dir, ids) in enumerate(cases):
            model = load_model(model_dir)
            results[str(i)] = model.forward(torch.tensor(ids), torch.arange(len(ids)))
        if rank == 0:
            save_file({k: v.contiguous() for k, v in results.items()}, out)
    finally:
        destroy_tp()


def tp_logits(model_dir: str | Path | list[str | Path], ids: list[int] | list[list[int]],
              tp: int) -> list[torch.Tensor]:
    """fp32 logits [len(ids), vocab] of a model split over `tp` CPU ranks (gloo), one tensor
    per case: a folder and its ids, or lists of both (one set of processes for all of them)."""
    if isinstance(model_dir, (str, Path)):
        model_dir, ids = [model_dir], [ids]
    cases = [(str(d), [int(i) for i in case]) for d, case in zip(model_dir, ids, strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "logits.safetensors")
        spawn_ranks(_logits_rank, tp, cases, out)
        found = load_file(out)
        return [found[str(i)] for i in range(len(cases))]
