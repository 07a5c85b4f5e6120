"""Tensor-parallel ranks of the scheduler, kept in step (chapter 17).

Every rank runs a whole Scheduler over its slice of the model, and every forward pass meets the
other ranks in its all-reduces, so all ranks must run the same batches in the same order. The
scheduler is deterministic: the same messages, applied at the same point of its loop, give the same
batches, and the sampled tokens agree too (every rank has the same logits after the LM head's
all-gather, and the same sampling seed, see engine.py). So only rank 0 talks to the tokenizer and
the detokenizer; once per loop it sends the other ranks the messages it is about to apply (often
none), and each of them applies the same messages at the same point and runs the same step. Its
replies are dropped: rank 0 answers for all.

The link is one ZeroMQ PUSH -> PULL socket per follower, carrying message-codec frames (no
pickles). Rank 0 binds, each follower connects; a frame sent before a follower is connected waits
for it, so nothing is lost at start-up.

With ranks on several machines (--nnodes), each machine's launcher watches the ranks it started,
but none of them sees another machine's ranks. The links do: `watch_other_nodes` ends a rank whose
link to another machine closes, and that rank's launcher then stops its machine.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import zmq
from zmq.utils.monitor import recv_monitor_message

from minisgl.message import ControlMsg, decode, encode
from minisgl.utils import init_logger

from .scheduler import Scheduler

logger = init_logger(__name__)

SHUTDOWN = "tp_shutdown"  # ControlMsg command that ends a follower's loop (offline LLM only)

# A process that dies closes its sockets at once, but a machine that loses power or its network
# closes nothing. ZeroMQ's heartbeats notice that: each end of a link PINGs the other every second
# (answered by the peer's ZeroMQ thread, even while its Python code is busy in a forward pass) and
# drops the connection after 10 s without an answer.
HEARTBEAT_IVL_MS = 1000
HEARTBEAT_TIMEOUT_MS = 10_000


@dataclass(frozen=True)
class TPRank:
    """Where one scheduler process stands among the tensor-parallel ranks."""

    rank: int
    size: int
    init_method: str  # torch.distributed rendezvous, e.g. tcp://127.0.0.1:29500
    links: tuple[str, ...]  # rank 0 -> rank r's message link is links[r - 1]
    ranks_per_node: int = 0  # GPUs: rank r uses cuda:(r % ranks_per_node); 0 means size
    # >>> ch27
    # Data parallelism (chapter 27): the --dp-size replica these ranks serve (None: the only
    # one). Replica i's ranks use the GPUs from cuda:(i * size) on.
    replica: int | None = None
    # <<< ch27

    def device(self, device: str) -> str:
        """This rank's device: its own GPU (by its place on its machine), or the CPU."""
        # >>> ch27
        if self.replica is not None and device.startswith("cuda"):
            return f"cuda:{self.replica * self.size + self.rank}"
        # <<< ch27
        if self.size == 1 or not device.startswith("cuda"):
            return device
        return f"cuda:{self.rank % (self.ranks_per_node or self.size)}"

    def node(self, rank: int) -> int:
        """The machine that `rank` runs on: ranks are numbered machine by machine."""
        return rank // (self.ranks_per_node or self.size)


def _socket(kind: int, addr: str, bind: bool) -> zmq.Socket:
    sock = zmq.Context.instance().socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
    sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
    if bind:
        sock.bind(addr)
    else:
        sock.connect(addr)
    return sock


class FollowerLinks:
    """Rank 0's side: the same frame to every follower."""

    def __init__(self, addrs: tuple[str, ...]) -> None:
        # rank r's socket is socks[r]
        self.socks = {r: _socket(zmq.PUSH, addr, bind=True) for r, addr in enumerate(addrs, 1)}

    def send(self, msgs: list[Any]) -> None:
        frame = encode(msgs)
        for sock in self.socks.values():
            sock.send(frame, copy=False)

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()


class LeaderLink:
    """A follower's side: rank 0's frames, one per loop of rank 0."""

    def __init__(self, addr: str) -> None:
        self.sock = _socket(zmq.PULL, addr, bind=False)

    def get(self) -> list[Any]:
        return decode(self.sock.recv(copy=False).bytes)

    def close(self) -> None:
        self.sock.close()


# What a link's monitor reports: a connection that ended, and the failed handshakes of
# connections that never were a link (a port scanner, a stray client).
_LINK_EVENTS = (zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
                | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


def watch_other_nodes(tp: TPRank, links: dict[int, zmq.Socket]) -> None:
    """End this process when its link to a rank on another machine closes (`links`: the peer
    rank's socket). Without this, a rank whose peer is gone waits forever: rank 0's frames to a
    dead rank have nowhere to go and its next forward pass waits in a collective, and a follower
    whose rank 0 is gone waits for frames that never come. Ranks on this machine need no watch:
    their launcher sees them die."""
    monitors = {sock.get_monitor_socket(_LINK_EVENTS): peer for peer, sock in links.items()
                if tp.node(peer) != tp.node(tp.rank)}
    if monitors:
        threading.Thread(target=_exit_when_a_link_closes, args=(tp, monitors),
                         name="link-watch", daemon=True).start()


def _exit_when_a_link_closes(tp: TPRank, monitors: dict[zmq.Socket, int]) -> None:
    poller = zmq.Poller()
    for monitor in monitors:
        poller.register(monitor, zmq.POLLIN)
    stranger = set()  # monitors whose next disconnect ends a failed handshake, not the link
    while True:
        for monitor, _ in poller.poll():
            event = recv_monitor_message(monitor)
            if event["event"] != zmq.EVENT_DISCONNECTED:
                stranger.add(monitor)  # a handshake failed; its disconnect comes right after
            elif monitor in stranger:
                stranger.discard(monitor)
            else:
                peer = monitors[monitor]
                logger.error("scheduler-rank%d: the link to scheduler-rank%d on node %d closed "
                             "(%s): that rank or its machine stopped; stopping this rank",
                             tp.rank, peer, tp.node(peer), event["endpoint"].decode())
                # The main thread may be blocked in a socket or a collective, where no exception
                # reaches it; a worker holds nothing that needs an orderly close (utils/mp.py).
                os._exit(1)


def follow(scheduler: Scheduler, link: LeaderLink, handle: Callable[[list[Any]], object]) -> None:
    """A follower rank's loop: apply rank 0's messages, then step exactly when rank 0 does."""
    with torch.inference_mode():
        while True:
            msgs = link.get()
            if any(isinstance(m, ControlMsg) and m.command == SHUTDOWN for m in msgs):
                return
            handle(msgs)
            if scheduler.has_work:
                scheduler.step()
