"""ZeroMQ queues between the server's processes, and what every worker process does first.

Every link is one-way PUSH -> PULL. The receiver binds (one PULL socket per process that reads)
and any number of senders connect, so several tokenizer workers can feed one scheduler. Messages
from one sender arrive in the order it sent them; that is what keeps an abort behind its request.

Addresses are `ipc://` sockets inside a private folder (mode 0700, made by `private_ipc_dir`), so
other users on the machine cannot connect, and nothing listens on the network.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio

from minisgl.message import decode, encode


def private_ipc_dir() -> Path:
    """A fresh folder only this user can enter; the launcher removes it at shutdown."""
    return Path(tempfile.mkdtemp(prefix="minisgl-"))


def ipc_addr(folder: Path, name: str) -> str:
    return f"ipc://{folder / name}"


def _socket(ctx: zmq.Context, kind: int, addr: str, bind: bool) -> zmq.Socket:
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)  # at shutdown, never wait for a peer that is gone
    if bind:
        sock.bind(addr)
    else:
        sock.connect(addr)
    return sock


class PushQueue:
    """Send lists of messages (each list is one frame). Connects by default."""

    def __init__(self, addr: str, *, bind: bool = False) -> None:
        self.addr = addr
        self._sock = _socket(zmq.Context.instance(), zmq.PUSH, addr, bind)

    def put(self, msgs: list[Any]) -> None:
        if msgs:
            self._sock.send(encode(msgs), copy=False)

    def close(self) -> None:
        self._sock.close()


class PullQueue:
    """Receive lists of messages. Binds by default."""

    def __init__(self, addr: str, *, bind: bool = True) -> None:
        self.addr = addr
        self._sock = _socket(zmq.Context.instance(), zmq.PULL, addr, bind)

    def get(self, timeout: float | None = None) -> list[Any]:
        """Wait for one frame (at most `timeout` seconds; [] when it passes)."""
        if timeout is not None and not self._sock.poll(int(timeout * 1000)):
            return []
        return decode(self._sock.recv(copy=False).bytes)

    def get_all(self, block: bool) -> list[Any]:
        """Every message waiting now; with block=True, wait for at least one frame first."""
        msgs = self.get() if block else []
        while self._sock.poll(0):
            msgs += decode(self._sock.recv(copy=False).bytes)
        return msgs

    def close(self) -> None:
        self._sock.close()


class AsyncPullQueue:
    """PullQueue for an asyncio event loop (the API server)."""

    def __init__(self, addr: str, *, bind: bool = True) -> None:
        self.addr = addr
        self._sock = _socket(zmq.asyncio.Context.instance(), zmq.PULL, addr, bind)

    async def get(self) -> list[Any]:
        return decode(await self._sock.recv())

    def close(self) -> None:
        self._sock.close()


def flush_before_exit(timeout: float = 1.0) -> None:
    """Deliver what this process's sockets still hold (waiting at most `timeout` s), close them.

    Sockets are made with LINGER 0, so a frame sent just before the process exits can be dropped
    unsent; a worker that reports a start-up error and then exits calls this in between.
    """
    zmq.Context.instance().destroy(linger=int(timeout * 1000))


def setup_worker_process() -> None:
    """First lines of every worker process the launcher starts.

    - Ctrl-C reaches the whole process group; only the launcher acts on it, and it then stops the
      workers in order, so workers ignore SIGINT.
    - SIGTERM (the launcher's stop request) exits cleanly through SystemExit.
    - If the launcher dies without cleaning up (even kill -9), the worker must not live on as an
      orphan holding memory: on Linux the kernel sends it SIGTERM (PR_SET_PDEATHSIG); elsewhere
      a thread notices that the parent process changed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    launcher = multiprocessing.parent_process()
    parent = launcher.pid if launcher is not None else os.getppid()
    if sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
        if os.getppid() != parent:  # the launcher died before the call above
            sys.exit(0)
    else:
        threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)
