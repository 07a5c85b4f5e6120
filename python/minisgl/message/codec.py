"""Messages on the wire: registered dataclasses <-> msgpack bytes.

Processes of the server talk through ZeroMQ sockets. What travels is msgpack, never pickle:
unpickling runs code chosen by whoever wrote the bytes, while decoding msgpack only builds numbers,
strings, lists and dicts. A message is a dataclass registered with `@message`; on the wire it is a
map with its type name under "_type". Decoding accepts only registered type names and only their
declared fields, so a stray or hostile frame fails with a MessageError instead of doing anything.

One frame carries a list of messages, so a whole decode step's tokens travel in one send.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import msgpack

from minisgl.core import SamplingParams, TokenOutput

T = TypeVar("T")
_TYPE_KEY = "_type"
_REGISTRY: dict[str, type] = {}


class MessageError(ValueError):
    """A frame that is not a list of known messages."""


def message(cls: type[T]) -> type[T]:
    """Class decorator: allow this dataclass on the wire under its class name."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass to be a message")
    if _REGISTRY.setdefault(cls.__name__, cls) is not cls:
        raise TypeError(f"two message types are called {cls.__name__}")
    return cls


message(SamplingParams)  # travels inside the request messages
message(TokenOutput)  # the scheduler's output for one request, sent to the detokenizer


def encode(msgs: list[Any]) -> bytes:
    """The frame of `msgs`; a value msgpack cannot carry (an integer beyond 64 bits, a string
    with a lone surrogate) is a MessageError, so the sender can fail that one request."""
    wire = [_to_wire(m) for m in msgs]  # an unregistered type is a bug: its TypeError stays
    try:
        return msgpack.packb(wire, use_bin_type=True)
    except (OverflowError, UnicodeEncodeError, ValueError) as e:
        raise MessageError(f"cannot encode {type(msgs[0]).__name__}: {e}") from None


def decode(frame: bytes) -> list[Any]:
    try:
        raw = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException) as e:
        raise MessageError(f"not a msgpack frame: {e}") from None
    if not isinstance(raw, list):
        raise MessageError(f"a frame must be a list of messages, got {type(raw).__name__}")
    return [_from_wire(item, top=True) for item in raw]


def _to_wire(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if _REGISTRY.get(name) is not type(value):
            raise TypeError(f"{name} is not a registered message type")
        fields = {f.name: _to_wire(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {_TYPE_KEY: name, **fields}
    if isinstance(value, (list, tuple)):
        return [_to_wire(v) for v in value]
    if isinstance(value, dict):
        if _TYPE_KEY in value:  # it would come back as a message, not as this dict
            raise TypeError(f"a plain dict cannot have the key {_TYPE_KEY!r}: it marks messages")
        return {k: _to_wire(v) for k, v in value.items()}
    return value


def _from_wire(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict) and _TYPE_KEY in value:
        return _build(value)
    if top:
        raise MessageError(f"expected a message, got {value!r:.80}")
    if isinstance(value, list):
        return [_from_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: _from_wire(v) for k, v in value.items()}
    return value


def _build(data: dict[str, Any]) -> Any:
    name = data.pop(_TYPE_KEY)
    cls = _REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        raise MessageError(f"unknown message type {name!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    if unknown := set(data) - known:
        raise MessageError(f"{name} has no field(s) {sorted(unknown)}")
    try:
        return cls(**{k: _from_wire(v) for k, v in data.items()})
    except (TypeError, ValueError) as e:  # a missing field, or a value __post_init__ rejects
        raise MessageError(f"bad {name}: {e}") from None
