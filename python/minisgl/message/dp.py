"""Data parallelism's front half (chapter 27): which replica runs each request, and the way there.

With --dp-size N the server runs N scheduler replicas, each a whole engine with its own KV pool,
behind one HTTP front, one set of tokenizers and one detokenizer. The replica of a request is
chosen in one place that sees every request and every finish: the frontend client, in the API
server's process. The choice travels with the request (the messages' dp_rank field) to its
tokenizer, which pushes it to that replica's socket; the replica's answers go to the one
detokenizer, which every replica pushes to.

    LoadBalancer    round_robin, or shortest_queue over the front's count of unfinished requests
    ReplicaQueues   a tokenizer's PUSH queue per replica; a message's dp_rank picks one
    ReplicaClient   the FrontendClient that stamps each message with its replica, and asks every
                    replica the control questions (stats, flush_cache), adding their answers up
"""

from __future__ import annotations

import asyncio
from typing import Any

from .client import FrontendClient, RequestStream
from .frontend import ControlReply
from .queues import PushQueue
from .tokenizer import AbortMsg, ControlMsg, TokenizeMsg

LOAD_BALANCE_METHODS = ("round_robin", "shortest_queue")  # SGLang's --load-balance-method names


def shortest_queue(unfinished: list[int], start: int = 0) -> int:
    """The replica with the fewest unfinished requests; among equals the first from `start` on,
    so that an idle server still takes the replicas in turn."""
    size = len(unfinished)
    return min(range(size), key=lambda r: (unfinished[r], (r - start) % size))


class LoadBalancer:
    """Picks a replica for each new request and counts what each one has been given.

    The counts are the front's own: a request is unfinished from `sent` until `finished`, which
    the client calls when its last reply arrives or it is let go. They need no question to the
    schedulers, so a busy replica (one long prefill) costs the choice nothing."""

    def __init__(self, size: int, method: str = "round_robin") -> None:
        if size < 1:
            raise ValueError(f"a balancer needs at least one replica, got {size}")
        if method not in LOAD_BALANCE_METHODS:
            raise ValueError(f"load balance method must be one of "
                             f"{', '.join(LOAD_BALANCE_METHODS)}, got {method!r}")
        self.size, self.method = size, method
        self.unfinished = [0] * size  # requests sent to each replica and not finished
        self.routed = [0] * size  # requests sent to each replica since the start
        self._turn = 0  # round robin's next replica, and shortest_queue's first among equals

    def choose(self) -> int:
        """The replica for the next request (counted only when `sent` is called)."""
        if self.method == "round_robin":
            replica = self._turn
        else:
            replica = shortest_queue(self.unfinished, self._turn)
        self._turn = (replica + 1) % self.size
        return replica

    def check(self, replica: int) -> None:
        if not 0 <= replica < self.size:
            raise ValueError(f"replica {replica} does not exist: there are {self.size} "
                             f"(0..{self.size - 1})")

    def sent(self, replica: int) -> None:
        self.check(replica)
        self.unfinished[replica] += 1
        self.routed[replica] += 1

    def finished(self, replica: int) -> None:
        self.unfinished[replica] -= 1


class ReplicaQueues:
    """A tokenizer's way to the schedulers: one PUSH queue per replica; each message goes to the
    replica its dp_rank names, in the order it came, so an abort never overtakes its request."""

    def __init__(self, queues: list[PushQueue]) -> None:
        self.queues = queues

    def put(self, msgs: list[Any]) -> None:
        for msg in msgs:
            if not 0 <= msg.dp_rank < len(self.queues):  # the front checks; this is a bug
                raise ValueError(f"{type(msg).__name__} for replica {msg.dp_rank}; there are "
                                 f"{len(self.queues)}")
            self.queues[msg.dp_rank].put([msg])

    def close(self) -> None:
        for queue in self.queues:
            queue.close()


class ReplicaClient(FrontendClient):
    """FrontendClient over several replicas: each request runs on the replica that the balancer
    (or the request itself, SGLang's `data_parallel_rank`) picks, and its abort follows it there."""

    def __init__(self, tokenizer_addrs: list[str], recv_addr: str, balancer: LoadBalancer
                 ) -> None:
        super().__init__(tokenizer_addrs, recv_addr)
        self.balancer = balancer
        self._replica_of: dict[int, int] = {}  # open request's uid -> its replica
        self._pinned: int | None = None  # the replica asked for by the request being submitted

    def submit(self, params: Any, *, dp_rank: int | None = None, **prompt: Any) -> RequestStream:
        """FrontendClient.submit, on replica `dp_rank` (None: the balancer's choice)."""
        if dp_rank is not None:
            self.balancer.check(dp_rank)
        self._pinned = dp_rank
        try:
            return super().submit(params, **prompt)
        finally:
            self._pinned = None

    def _send(self, uid: int, msg: Any) -> None:
        if isinstance(msg, TokenizeMsg):
            replica = self.balancer.choose() if self._pinned is None else self._pinned
            self.balancer.sent(replica)
            self._replica_of[uid] = msg.dp_rank = replica
        elif isinstance(msg, AbortMsg) and uid not in self._replica_of:
            # Sent after the request was forgotten here (the client left, or it failed): the
            # replica is no longer known, so every replica is told. One that does not hold the
            # request ignores it, and through the same tokenizer it comes after the request.
            for replica in range(self.balancer.size):
                super()._send(uid, AbortMsg(uid, replica))
            return
        elif isinstance(msg, AbortMsg):
            msg.dp_rank = self._replica_of[uid]
        super()._send(uid, msg)

    def _forget(self, uid: int) -> None:
        super()._forget(uid)
        replica = self._replica_of.pop(uid, None)
        if replica is not None:
            self.balancer.finished(replica)

    async def control(self, command: str, timeout: float = 30.0) -> ControlReply:
        """Every replica's answer, added up (see `combine`); "limits" asks replica 0 only: every
        replica runs the same model with the same settings."""
        if command == "limits":
            return await self._ask(0, command, timeout)
        replies = await asyncio.gather(*(self._ask(replica, command, timeout)
                                         for replica in range(self.balancer.size)))
        return combine(replies, self.balancer)

    async def _ask(self, replica: int, command: str, timeout: float) -> ControlReply:
        uid = next(self._uids)
        queue = self._queues[uid] = asyncio.Queue()
        self._send(uid, ControlMsg(uid, command, replica))
        try:
            return await asyncio.wait_for(queue.get(), timeout)
        finally:
            self._forget(uid)


def combine(replies: list[ControlReply], balancer: LoadBalancer) -> ControlReply:
    """One answer from every replica's: each number summed over the replicas (pages, requests,
    batches), and each replica's own numbers under "replicas", with the front's counts of the
    requests it was given. Failed unless every replica succeeded; the errors name the replicas."""
    numbers = {key for reply in replies for key, value in reply.info.items()
               if isinstance(value, (int, float)) and not isinstance(value, bool)}
    total: dict[str, Any] = {key: sum(reply.info.get(key, 0) for reply in replies)
                             for key in sorted(numbers)}
    total["replicas"] = [{"dp_rank": replica, **reply.info,
                          "routed_requests": balancer.routed[replica],
                          "unfinished_requests": balancer.unfinished[replica]}
                         for replica, reply in enumerate(replies)]
    errors = [f"replica {replica}: {reply.error}" for replica, reply in enumerate(replies)
              if not reply.ok]
    return ControlReply(replies[0].uid, not errors, total, "; ".join(errors) or None)
