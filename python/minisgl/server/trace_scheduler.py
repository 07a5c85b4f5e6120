"""The server's scheduler process with a FlashInfer Trace session (chapters 21-22).

`--trace-dir` records workloads while serving and `--trace-set` runs each op with its fastest
verified solution. The trace sits above the engine (it installs itself as the op registry's hook,
minisgl.ops.hook), so neither the scheduler nor the engine starts it: the process that builds
them does, as LLM does offline. This is that process's entry point in the server.
"""

from __future__ import annotations

from dataclasses import replace

from minisgl.scheduler.io import run_scheduler_process
from minisgl.scheduler.tp import TPRank
from minisgl.trace.session import trace_session

from .args import ServerArgs


def run_scheduler_with_trace(args: ServerArgs, recv_addr: str, send_addr: str, ready_addr: str,
                             tp: TPRank | None = None) -> None:
    """run_scheduler_process, with the session of args.trace_dir / args.trace_set installed in
    this process first (on this rank's device) and closed when the scheduler ends, which writes
    the capture's summary."""
    device = args.device if tp is None else tp.device(args.device)
    session = trace_session(replace(args, device=device))
    if session is not None:  # apply may have chosen the attention backend
        args = replace(args, attention_backend=session.engine_config.attention_backend)
    try:
        run_scheduler_process(args, recv_addr, send_addr, ready_addr, tp)
    finally:
        if session is not None:
            session.close()
