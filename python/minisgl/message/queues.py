"""ZeroMQ queues between the server's processes; each frame is one list of messages in the codec of
codec.py.

Every link is one-way PUSH -> PULL. The receiver binds (one PULL socket per process that reads)
and any number of senders connect, so several tokenizer workers can feed one scheduler. Messages
from one sender arrive in the order it sent them; that is what keeps an abort behind its request.
The addresses are `ipc://` sockets in the launcher's private folder (utils/mp.py).
"""

from __future__ import annotations

from typing import Any

import zmq
import zmq.asyncio

from .codec import decode, encode


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
