"""Start the server's processes, watch them, and stop them all together (chapter 14).

    launcher (this process): the API server or the shell, plus a watchdog thread
      |- tokenizer-0 .. tokenizer-N-1   text -> token ids
      |- scheduler                      the engine: batches, KV cache, forward passes
      '- detokenizer                    token ids -> text pieces

Whatever ends the launcher ends the workers: Ctrl-C, SIGTERM, /exit in the shell, or the death of
any worker (the watchdog notices and stops the launcher). If the launcher itself is killed with
no chance to clean up, each worker gets SIGTERM from the kernel (see utils/mp.py).
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing as mp
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from minisgl.distributed.local import free_port
from minisgl.message import ReadyMsg
from minisgl.message.client import FrontendClient
from minisgl.message.dp import LoadBalancer, ReplicaClient
from minisgl.message.queues import PullQueue
from minisgl.scheduler.io import run_scheduler_process
from minisgl.scheduler.tp import TPRank
from minisgl.tokenizer.server import detokenize_worker, tokenize_worker
from minisgl.utils import init_logger
from minisgl.utils.logger import set_log_level
from minisgl.utils.misc import MinisglError, run_main
from minisgl.utils.mp import ipc_addr, private_ipc_dir, remove_stale_ipc_dirs
from minisgl.utils.proctitle import set_process_title

from .args import FlagError, ServerArgs, build_parser, parse_args
from .dp import replica_addrs, replica_ranks
from .trace_scheduler import run_scheduler_with_trace

logger = init_logger(__name__)

STARTUP_TIMEOUT_S = 900.0  # loading a large model from a slow disk can take minutes


@dataclass(frozen=True)
class Addresses:
    """Where each process listens (its PULL socket), all inside one private folder."""

    folder: Path
    num_tokenizer: int

    @property
    def tokenizers(self) -> list[str]:
        return [ipc_addr(self.folder, f"tokenizer-{i}") for i in range(self.num_tokenizer)]

    @property
    def scheduler(self) -> str:
        return ipc_addr(self.folder, "scheduler")

    @property
    def detokenizer(self) -> str:
        return ipc_addr(self.folder, "detokenizer")

    @property
    def frontend(self) -> str:
        return ipc_addr(self.folder, "frontend")

    @property
    def ready(self) -> str:
        return ipc_addr(self.folder, "ready")


class Workers:
    """The worker processes: start, wait until each says it is ready, watch, stop."""

    def __init__(self, args: ServerArgs, addrs: Addresses) -> None:
        self.addrs = addrs
        self.stopping = False
        self.died: str | None = None  # the worker whose death brought the server down
        ctx = mp.get_context("spawn")  # a fresh interpreter: no copied locks, CUDA state or sockets
        self.procs: list[mp.process.BaseProcess] = [
            *scheduler_ranks(ctx, args, addrs),
            ctx.Process(target=detokenize_worker, name="detokenizer",
                        args=(args.model_path, addrs.detokenizer, addrs.frontend, addrs.ready)),
        ]
        if args.node_rank > 0:  # another machine's ranks only: node 0 runs the frontend
            self.procs = [proc for proc in self.procs if proc.name.startswith("scheduler")]
            return
        for i, addr in enumerate(addrs.tokenizers):
            self.procs.append(ctx.Process(
                target=tokenize_worker, name=f"tokenizer-{i}",
                args=(args.model_path, addr, addrs.scheduler, addrs.frontend, addrs.ready,
                      f"tokenizer-{i}"),
                # >>> ch27
                kwargs={"more_replicas": tuple(
                    replica_addrs(addrs.folder, addrs.scheduler, args.dp_size)[1:])},
                # <<< ch27
            ))

    def start(self) -> None:
        ready = PullQueue(self.addrs.ready)  # bound before any worker can report
        try:
            for proc in self.procs:
                proc.start()
            self._wait_ready(ready)
        finally:
            ready.close()
        threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    def _wait_ready(self, ready: PullQueue) -> None:
        waiting = {proc.name for proc in self.procs}
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while waiting:
            for msg in ready.get(timeout=0.5):
                if isinstance(msg, ReadyMsg) and msg.error is not None:
                    raise MinisglError(f"{msg.name} could not start: {msg.error}")
                if isinstance(msg, ReadyMsg):
                    waiting.discard(msg.name)
                    logger.info("%s is ready", msg.name)
            for proc in self.procs:
                if not proc.is_alive() and proc.name in waiting:
                    raise MinisglError(f"{proc.name} exited during start-up "
                                       f"(exit code {proc.exitcode}); see its log above")
            if time.monotonic() > deadline:
                raise MinisglError(f"start-up took over {STARTUP_TIMEOUT_S:.0f} s; still waiting "
                                   f"for {', '.join(sorted(waiting))}")

    def _watch(self) -> None:
        """Runs in a thread: if any worker dies while serving, stop the launcher too."""
        sentinels = {proc.sentinel: proc for proc in self.procs}
        dead = multiprocessing.connection.wait(list(sentinels))
        if self.stopping:
            return
        proc = sentinels[dead[0]]  # type: ignore[index]
        proc.join(1)  # reap it, so that its exit code is known
        self.died = proc.name
        logger.error("%s exited unexpectedly (exit code %s); shutting the server down",
                     proc.name, proc.exitcode)
        os.kill(os.getpid(), signal.SIGTERM)

    def stop(self) -> None:
        self.stopping = True
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self.procs:
            proc.join(max(0.1, deadline - time.monotonic()))
            if proc.is_alive():
                logger.warning("%s did not stop in time; killing it", proc.name)
                proc.kill()
                proc.join()


# What a scheduler process runs
scheduler_main = run_scheduler_process
# >>> ch21
scheduler_main = run_scheduler_with_trace  # --trace-dir / --trace-set: a trace session first
# <<< ch21


def scheduler_ranks(ctx, args: ServerArgs, addrs: Addresses) -> list[mp.process.BaseProcess]:
    """This machine's scheduler processes: rank 0 alone, or its share of the --tp ranks."""
    # >>> ch27
    if args.dp_size > 1:  # a group of ranks per replica, each reading its own socket (dp.py)
        return replica_ranks(ctx, args, addrs.folder, addrs.scheduler, addrs.detokenizer,
                             addrs.ready, scheduler_main)
    # <<< ch27
    size = args.tp_size
    if size == 1:
        return [ctx.Process(target=scheduler_main, name="scheduler",
                            args=(args, addrs.scheduler, addrs.detokenizer, addrs.ready))]
    if args.dist_init_addr is None:  # one machine: a free loopback port, links in the ipc folder
        init_method = f"tcp://127.0.0.1:{free_port()}"
        links = tuple(ipc_addr(addrs.folder, f"tp-rank{r}") for r in range(1, size))
    else:  # rank 0 listens on node 0's address: the rendezvous on PORT, its links above it
        host, _, port = args.dist_init_addr.rpartition(":")
        init_method = f"tcp://{host}:{port}"
        links = tuple(f"tcp://{host}:{int(port) + r}" for r in range(1, size))
    per_node = size // args.nnodes
    first = args.node_rank * per_node
    return [ctx.Process(target=scheduler_main, name=f"scheduler-rank{rank}",
                        args=(args, addrs.scheduler, addrs.detokenizer, addrs.ready,
                              TPRank(rank, size, init_method, links, per_node)))
            for rank in range(first, first + per_node)]


def bind_http_socket(host: str, port: int) -> socket.socket:
    """Take the port before loading anything, so a port in use fails in a second, not after."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise MinisglError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    return sock


class StopRequested(BaseException):
    """Raised by the SIGTERM handler; unwinds like Ctrl-C's KeyboardInterrupt does."""


def _stop_requested(*_: object) -> None:
    raise StopRequested


def launch(args: ServerArgs, run_shell: bool) -> int:
    """Run the server (or the shell) until it is told to stop; the exit code."""
    # SIGTERM unwinds through the `finally` below like Ctrl-C does; uvicorn hands the signal
    # back to this handler after its own graceful shutdown.
    signal.signal(signal.SIGTERM, _stop_requested)
    set_process_title("shell" if run_shell else "api-server")
    frontend = args.node_rank == 0  # other machines run scheduler ranks only
    if not frontend:
        set_process_title(f"node{args.node_rank}")  # it serves no API itself
    sock = bind_http_socket(args.host, args.port) if frontend and not run_shell else None
    if args.log_level is not None:  # the workers read it when they start
        set_log_level(args.log_level)
    if run_shell:  # keep the workers' INFO lines out of the conversation
        os.environ.setdefault("MINISGL_LOG_LEVEL", "WARNING")
    for folder in remove_stale_ipc_dirs():
        logger.info("removed %s, left by a launcher that was killed", folder)
    addrs = Addresses(private_ipc_dir(), args.num_tokenizer)
    workers = None
    try:
        workers = Workers(args, addrs)
        workers.start()
        if args.node_rank > 0:
            logger.info("node %d: scheduler ranks are up; node 0 serves", args.node_rank)
            while True:  # until a signal, or the watchdog reports a rank's death
                time.sleep(3600)
        if run_shell:
            from minisgl.shell import run_shell as shell_main

            shell_main(addrs.tokenizers, addrs.frontend)
        else:
            _serve_http(args, addrs, sock, workers)
    except (KeyboardInterrupt, StopRequested):
        pass
    finally:
        if workers is not None:
            workers.stop()
        if sock is not None:
            sock.close()
        shutil.rmtree(addrs.folder, ignore_errors=True)
        logger.info("server stopped")
    if workers is not None and workers.died is not None:
        return 1
    return 0


def _serve_http(args: ServerArgs, addrs: Addresses, sock: socket.socket,
                workers: Workers) -> None:
    import uvicorn

    from .api_server import ApiServer, create_app

    client = frontend_client(args, addrs)
    app = create_app(client, args, dead_worker=lambda: workers.died)
    # uvicorn's own lines (one per request at INFO) only when debugging
    config = uvicorn.Config(app, log_level="debug" if args.log_level == "DEBUG" else "warning",
                            timeout_graceful_shutdown=5)
    logger.info("serving %s on http://%s:%d (OpenAI API at /v1)",
                args.served_model_name or args.model_name, args.host, args.port)
    ApiServer(config, client).run(sockets=[sock])


def frontend_client(args: ServerArgs, addrs: Addresses) -> FrontendClient:
    """What the API server sends requests and questions through."""
    # >>> ch27
    if args.dp_size > 1:  # each request to one replica, each question to all (message/dp.py)
        return ReplicaClient(addrs.tokenizers, addrs.frontend,
                             LoadBalancer(args.dp_size, args.load_balance_method))
    # <<< ch27
    return FrontendClient(addrs.tokenizers, addrs.frontend)


def shell_log_level(argv: list[str] | None, environ: dict[str, str] | os._Environ) -> str | None:
    """WARNING for --shell without --log-level or MINISGL_LOG_LEVEL (as --help says), else None.

    Decided before the flags are parsed for real: resolving the model already logs a line
    (the fallback to the bundled model), and it must not land in the conversation."""
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        try:
            ns, _ = build_parser().parse_known_args(argv)
        except SystemExit:  # --help or a bad flag: the parse that follows prints it, once
            return None
    if ns.shell and ns.log_level is None and not environ.get("MINISGL_LOG_LEVEL"):
        return "WARNING"
    return None


def main(argv: list[str] | None = None) -> int:
    if (level := shell_log_level(argv, os.environ)) is not None:
        set_log_level(level)  # this process's loggers, and the workers' through the environment
    try:
        args, run_shell = run_main(lambda: parse_args(argv))
    except FlagError as e:  # a flag's value is wrong: exit code 2, as argparse's own errors
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run_main(lambda: launch(args, run_shell))


if __name__ == "__main__":
    sys.exit(main())
