"""An offline LLM's tensor-parallel ranks on this machine (chapter 17).

`LLM(..., tp_size=n)` is rank 0 itself, in the caller's process; ranks 1..n-1 are spawned
processes that follow it (tp.py). This module stands above both tp.py and io.py: a follower
applies rank 0's messages with SchedulerIO's handler, as a server's ranks do.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import time
from dataclasses import replace
from typing import Any

from minisgl.distributed import destroy_tp, init_tp
from minisgl.distributed.local import free_port
from minisgl.message import ControlMsg
from minisgl.utils.mp import ipc_addr, private_ipc_dir, setup_worker_process

from .config import SchedulerConfig
from .io import SchedulerIO
from .scheduler import Scheduler
from .tp import SHUTDOWN, FollowerLinks, LeaderLink, TPRank, follow


def run_follower_process(config: SchedulerConfig, tp: TPRank) -> None:
    """Entry point of a follower rank that the offline LLM starts (the server's go through
    scheduler/io.py, which also reports to the launcher)."""
    setup_worker_process()
    config = replace(config, device=tp.device(config.device))
    init_tp(tp.rank, tp.size, tp.init_method, config.device)
    scheduler = Scheduler(config)
    follow(scheduler, LeaderLink(tp.links[tp.rank - 1]), SchedulerIO(scheduler).handle)
    destroy_tp()


class OfflineRanks:
    """Ranks 1..size-1 of an offline LLM, as processes on this machine; the caller is rank 0.

    `send` goes before each of rank 0's steps with the requests it added since the last one."""

    def __init__(self, config: SchedulerConfig, size: int) -> None:
        self._folder = private_ipc_dir()
        links = tuple(ipc_addr(self._folder, f"tp-rank{r}") for r in range(1, size))
        init_method = f"tcp://127.0.0.1:{free_port()}"
        self.rank0 = TPRank(0, size, init_method, links)
        ctx = mp.get_context("spawn")
        self.procs = [ctx.Process(target=run_follower_process, name=f"tp-rank{r}", daemon=True,
                                  args=(config, TPRank(r, size, init_method, links)))
                      for r in range(1, size)]
        for proc in self.procs:
            proc.start()
        self.links = FollowerLinks(links)

    def send(self, msgs: list[Any]) -> None:
        for proc in self.procs:
            if not proc.is_alive():
                raise RuntimeError(f"tensor-parallel {proc.name} exited (exit code "
                                   f"{proc.exitcode}); the LLM cannot continue")
        self.links.send(msgs)

    def shutdown(self, timeout_s: float = 10.0) -> None:
        if all(proc.is_alive() for proc in self.procs):
            self.links.send([ControlMsg(-1, SHUTDOWN)])
        deadline = time.monotonic() + timeout_s
        for proc in self.procs:
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.links.close()
        shutil.rmtree(self._folder, ignore_errors=True)
