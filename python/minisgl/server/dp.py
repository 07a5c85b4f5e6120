"""Data parallelism's back half (chapter 27): the replicas' processes, and what the server reports
of them.

    --dp-size 2 --tp 1              --dp-size 2 --tp 2 (four GPUs)
      scheduler-dp0   cuda:0          scheduler-dp0-rank0  cuda:0   scheduler-dp0-rank1  cuda:1
      scheduler-dp1   cuda:1          scheduler-dp1-rank0  cuda:2   scheduler-dp1-rank1  cuda:3

Each replica is a whole scheduler (with its own tensor-parallel group under --tp), reading its
own socket: replica 0 the scheduler's usual address, replica i `scheduler-dp{i}` in the same
private folder. On a CPU the replicas share the cores, so each takes its share of the threads.
The launcher watches every process, so a replica that dies brings the server down naming it.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from minisgl.distributed.local import free_port
from minisgl.scheduler.tp import TPRank
from minisgl.utils.mp import ipc_addr

# The settings' type, for the annotations, and nothing else of server/: launch.py, metrics.py and
# routes_ops.py import this module, so it takes the launcher's addresses as plain values (a path
# and strings), and the flag checks live in args.py, which imports nothing from here.
if TYPE_CHECKING:
    from .args import ServerArgs


def replica_addrs(folder: Path, scheduler_addr: str, dp_size: int) -> list[str]:
    """Each replica's input socket, in the launcher's private ipc folder; replica 0 keeps the
    scheduler's address."""
    return [scheduler_addr, *(ipc_addr(folder, f"scheduler-dp{i}") for i in range(1, dp_size))]


def replica_ranks(ctx: Any, args: ServerArgs, folder: Path, scheduler_addr: str, send_addr: str,
                  ready_addr: str, main: Callable[..., None]) -> list[mp.process.BaseProcess]:
    """The scheduler processes of every replica: `main` (the scheduler's entry point) in each,
    with the replica's own rendezvous port and rank links under --tp. The addresses are the
    launcher's (its Addresses): every replica sends to the one detokenizer and reports ready to
    the one launcher."""
    size, procs = args.tp_size, []
    threads = max(1, (os.cpu_count() or 1) // (args.dp_size * size))
    for replica, recv_addr in enumerate(replica_addrs(folder, scheduler_addr, args.dp_size)):
        init_method = f"tcp://127.0.0.1:{free_port()}" if size > 1 else ""
        links = tuple(ipc_addr(folder, f"dp{replica}-tp-rank{r}") for r in range(1, size))
        for rank in range(size):
            tp = TPRank(rank, size, init_method, links, replica=replica)
            name = f"scheduler-dp{replica}" + (f"-rank{rank}" if size > 1 else "")
            procs.append(ctx.Process(target=run_replica, name=name, args=(
                threads, main, args, recv_addr, send_addr, ready_addr, tp)))
    return procs


def run_replica(threads: int, main: Callable[..., None], args: ServerArgs, recv_addr: str,
                send_addr: str, ready_addr: str, tp: TPRank) -> None:
    """A replica's process: on a GPU, its own GPU made the current one (streams and CUDA graphs
    are made on the current device; a TP group sets it when it starts, a lone rank must do it
    here); on a CPU, its share of the threads (a TP group sets its own). Then the scheduler."""
    if args.device.startswith("cuda"):
        torch.cuda.set_device(tp.device(args.device))
    else:
        torch.set_num_threads(threads)
    main(args, recv_addr, send_addr, ready_addr, tp)


def load_rows(stats: dict[str, Any], page_size: int) -> list[dict[str, int]]:
    """SGLang's /get_load: per replica, its requests (running and waiting), the waiting ones,
    and the tokens its requests hold in the KV pool."""
    replicas = stats.get("replicas") or [{"dp_rank": 0, **stats}]
    return [{"dp_rank": s["dp_rank"],
             "num_reqs": s.get("running_requests", 0) + s.get("waiting_requests", 0),
             "num_waiting_reqs": s.get("waiting_requests", 0),
             "num_tokens": s.get("request_pages", 0) * page_size} for s in replicas]


def replica_metrics(stats: dict[str, Any], model_name: str) -> Iterator[Metric]:
    """Each replica's series, labelled dp_rank, beside the totals (metrics.py): its requests and
    KV usage as the scheduler answered them, and the requests the front has sent it."""
    replicas = stats.get("replicas") or []
    gauges = {
        "dp_num_requests_running": ("Requests in the replica's decode batch.",
                                    lambda s: s.get("running_requests", 0)),
        "dp_num_requests_waiting": ("Requests waiting for the replica's prefill.",
                                    lambda s: s.get("waiting_requests", 0)),
        "dp_kv_cache_usage_perc": ("Share of the replica's KV pages held by requests (0..1).",
                                   lambda s: s.get("request_pages", 0) / max(1, s.get(
                                       "total_pages", 0))),
        "dp_unfinished_requests": ("Requests the front has sent the replica, not finished.",
                                   lambda s: s["unfinished_requests"]),
    }
    labels = ["model_name", "dp_rank"]
    for name, (doc, value) in gauges.items():
        family = GaugeMetricFamily("minisgl:" + name, doc, labels=labels)
        for s in replicas:
            family.add_metric([model_name, str(s["dp_rank"])], value(s))
        yield family
    family = CounterMetricFamily("minisgl:dp_requests_routed", "Requests the front has sent the "
                                 "replica.", labels=labels)
    for s in replicas:
        family.add_metric([model_name, str(s["dp_rank"])], s["routed_requests"])
    yield family
