"""The frontend's end of the pipeline: send requests to the tokenizers, await replies by uid.

Both front doors use it: the HTTP API server (server/) and the interactive shell (shell.py), so it
lives below both of them. One task reads the
frontend socket and puts each reply on the queue of its request. A request always goes to the same
tokenizer worker (uid % workers) as its abort later does, so the abort cannot overtake it.

At shutdown `fail_all` ends every open request with an error reply, so each client hears why its
answer stops instead of seeing the connection cut.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from minisgl.core import SamplingParams
from minisgl.utils import init_logger

from .codec import MessageError
from .frontend import ControlReply, UserReply
from .queues import AsyncPullQueue, PushQueue
from .tokenizer import AbortMsg, ControlMsg, TokenizeMsg

logger = init_logger(__name__)


class RequestStream:
    """The replies of one request, as an async iterator that ends after the finished reply.

    Always `close()` it (in a `finally`): if the request is still running, that aborts it, so a
    client that went away does not keep its KV pages busy.
    """

    def __init__(self, client: FrontendClient, uid: int, queue: asyncio.Queue) -> None:
        self.uid = uid
        self._client = client
        self._queue = queue
        self.finished = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> UserReply:
        if self.finished:
            raise StopAsyncIteration
        reply: UserReply = await self._queue.get()
        if reply.finished:
            self.finished = True
            self._client._forget(self.uid)
            if reply.finish_reason == "error":
                # A worker other than the scheduler may have failed it (the detokenizer): make
                # sure the scheduler stops it too. Aborting a finished request does nothing.
                self._client._send(self.uid, AbortMsg(self.uid))
        return reply

    def close(self) -> None:
        """Abort the request if it has not finished. Safe to call twice; never blocks."""
        if not self.finished:
            self.finished = True
            self._client._forget(self.uid)
            self._client._send(self.uid, AbortMsg(self.uid))


class FrontendClient:
    def __init__(self, tokenizer_addrs: list[str], recv_addr: str) -> None:
        self._senders = [PushQueue(addr) for addr in tokenizer_addrs]
        self._recv = AsyncPullQueue(recv_addr)
        self._queues: dict[int, asyncio.Queue] = {}  # requests' and control questions' replies
        self._requests: set[int] = set()  # the uids of open requests
        self._uids = itertools.count()
        self._listener: asyncio.Task | None = None
        self.closing: str | None = None  # set by fail_all: why no request is taken any more

    @property
    def open_requests(self) -> int:
        """Requests submitted and not finished or closed yet."""
        return len(self._requests)

    def start(self) -> None:
        """Start reading replies; call once from inside the running event loop."""
        self._listener = asyncio.get_running_loop().create_task(self._listen())

    async def _listen(self) -> None:
        while True:
            for reply in await self._recv.get():
                queue = self._queues.get(reply.uid)
                if queue is not None:  # None: the request was closed; its last replies are stale
                    queue.put_nowait(reply)

    def submit(self, params: SamplingParams, *, text: str | None = None,
               input_ids: list[int] | None = None, messages: list[dict[str, Any]] | None = None
               ) -> RequestStream:
        """Send one request (a prompt text, token ids, or a chat) and return its replies."""
        uid = next(self._uids)
        queue = self._queues[uid] = asyncio.Queue()
        self._requests.add(uid)
        if self.closing is not None:
            queue.put_nowait(self._closing_reply(uid))
            return RequestStream(self, uid, queue)
        try:
            self._send(uid, TokenizeMsg(uid, params, text, input_ids, messages))
        except MessageError as e:  # a value the wire cannot carry: this request fails alone
            queue.put_nowait(UserReply(uid=uid, finished=True, finish_reason="error",
                                       error=str(e)))
        return RequestStream(self, uid, queue)

    def fail_all(self, reason: str) -> None:
        """End every open request now with an error reply (finish_reason "abort"), and every
        later one at once; the scheduler is told to stop them. Call it in the event loop."""
        self.closing = reason
        for uid in list(self._requests):
            self._queues[uid].put_nowait(self._closing_reply(uid))
            self._send(uid, AbortMsg(uid))

    def _closing_reply(self, uid: int) -> UserReply:
        return UserReply(uid=uid, finished=True, finish_reason="abort", error=self.closing)

    async def control(self, command: str, timeout: float = 30.0) -> ControlReply:
        """Ask the scheduler something ("stats", "flush_cache") and wait for its answer; the
        round trip through every process doubles as a health check."""
        uid = next(self._uids)
        queue = self._queues[uid] = asyncio.Queue()
        self._send(uid, ControlMsg(uid, command))
        try:
            return await asyncio.wait_for(queue.get(), timeout)
        finally:
            self._forget(uid)

    def _send(self, uid: int, msg: Any) -> None:
        self._senders[uid % len(self._senders)].put([msg])

    def _forget(self, uid: int) -> None:
        self._queues.pop(uid, None)
        self._requests.discard(uid)

    async def aclose(self) -> None:
        """Stop reading replies, then close the sockets (closing one that a pending read still
        polls makes zmq report "Socket operation on non-socket")."""
        if self._listener is not None:
            self._listener.cancel()
            try:
                await self._listener
            except asyncio.CancelledError:
                pass
        self.close()

    def close(self) -> None:
        """Close the sockets at once; prefer `aclose` inside the event loop."""
        if self._listener is not None:
            self._listener.cancel()
        for sender in self._senders:
            sender.close()
        self._recv.close()
