"""Messages on the pipes between the judge's processes: a JSON header line, then raw payloads.

A message is `{..., "sizes": [n1, n2, ...]}\\n` followed by n1 + n2 + ... bytes (case inputs and
outputs: tagged JSON and safetensors bytes, see codec.py). Standard library only: the sandboxed
harness imports it before anything else.
"""

from __future__ import annotations

import json

MAX_HEADER = 64 * 1024


class FrameError(ValueError):
    """Bytes that are not a well-formed message (or announce more than the reader accepts)."""


def pack(header: dict, *payloads: bytes) -> bytes:
    line = json.dumps({**header, "sizes": [len(p) for p in payloads]}, ensure_ascii=False)
    return line.encode("utf-8") + b"\n" + b"".join(payloads)


def _header(line: bytes, max_payload: int) -> tuple[dict, list[int]]:
    try:
        header = json.loads(line)
    except ValueError:
        raise FrameError("header is not JSON") from None
    sizes = header.get("sizes") if isinstance(header, dict) else None
    if not isinstance(sizes, list) or len(sizes) > 8 \
            or not all(type(n) is int and n >= 0 for n in sizes):
        raise FrameError("header without valid sizes")
    if sum(sizes) > max_payload:
        raise FrameError(f"payload of {sum(sizes)} bytes is over the limit of {max_payload}")
    return header, sizes


class Reader:
    """Splits a byte stream into messages as the bytes arrive."""

    def __init__(self, max_payload: int):
        self.max_payload = max_payload
        self.buffer = b""
        self.pending: tuple[dict, list[int]] | None = None

    def feed(self, data: bytes) -> list[tuple[dict, list[bytes]]]:
        self.buffer += data
        messages = []
        while True:
            if self.pending is None:
                end = self.buffer.find(b"\n", 0, MAX_HEADER + 1)
                if end < 0:
                    if len(self.buffer) > MAX_HEADER:
                        raise FrameError("header line too long")
                    return messages
                self.pending = _header(self.buffer[:end], self.max_payload)
                self.buffer = self.buffer[end + 1:]
            header, sizes = self.pending
            if len(self.buffer) < sum(sizes):
                return messages
            payloads, pos = [], 0
            for n in sizes:
                payloads.append(self.buffer[pos:pos + n])
                pos += n
            self.buffer = self.buffer[pos:]
            self.pending = None
            messages.append((header, payloads))

    @property
    def idle(self) -> bool:
        """No partial message buffered."""
        return self.pending is None and not self.buffer


def read(stream, max_payload: int) -> tuple[dict, list[bytes]] | None:
    """One message from a blocking binary file; None at a clean end of file."""
    line = stream.readline(MAX_HEADER + 1)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise FrameError("header line too long or cut off")
    header, sizes = _header(line[:-1], max_payload)
    payloads = [stream.read(n) for n in sizes]
    if any(len(p) != n for p, n in zip(payloads, sizes)):
        raise FrameError("message cut off")
    return header, payloads
