"""Reference solution of exercise 1201."""

from dataclasses import dataclass, fields, is_dataclass, make_dataclass

import msgpack

TYPE_KEY = "_type"  # 线路上每条消息是一个 map，类名放在这个键下


@dataclass
class Sampling:
    temperature: float
    max_tokens: int
    stop: list[str]


@dataclass
class AddReq:
    uid: int
    input_ids: list[int]
    sampling: Sampling  # 嵌套的消息


@dataclass
class TokenOut:
    uid: int
    token: int
    text: str
    finished: bool = False  # 唯一有默认值的字段


@dataclass
class Abort:
    uid: int


# 只有这些类型可以上线路：类名 -> 类
REGISTRY = {cls.__name__: cls for cls in (Sampling, AddReq, TokenOut, Abort)}


def encode(msgs: list) -> bytes:
    if not isinstance(msgs, (list, tuple)):
        raise ValueError(f"encode takes a list of messages, got {type(msgs).__name__}")
    for m in msgs:
        if not _registered(m):
            raise ValueError(f"{type(m).__name__} is not a registered message")
    return msgpack.packb([_to_wire(m) for m in msgs], use_bin_type=True)


def decode(frame: bytes) -> list:
    try:
        raw = msgpack.unpackb(frame, raw=False, strict_map_key=True)
    except (ValueError, msgpack.UnpackException) as e:
        raise ValueError(f"not a msgpack frame: {e}") from None
    if not isinstance(raw, list):
        raise ValueError(f"a frame must be a list of messages, got {type(raw).__name__}")
    out = []
    for item in raw:
        if not isinstance(item, dict) or TYPE_KEY not in item:
            raise ValueError(f"expected a message, got {item!r:.80}")
        out.append(_build_message(item))
    return out


def _registered(value) -> bool:
    return REGISTRY.get(type(value).__name__) is type(value)


def _to_wire(value):
    if is_dataclass(value) and not isinstance(value, type):
        if not _registered(value):
            raise ValueError(f"{type(value).__name__} is not a registered message")
        return {TYPE_KEY: type(value).__name__,
                **{f.name: _to_wire(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, (list, tuple)):
        return [_to_wire(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_wire(v) for k, v in value.items()}
    return value


def _from_wire(value):
    if isinstance(value, dict):
        if TYPE_KEY in value:
            return _build_message(value)
        return {k: _from_wire(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_wire(v) for v in value]
    return value


def _build_message(data: dict):
    data = dict(data)
    name = data.pop(TYPE_KEY)
    cls = REGISTRY.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown message type {name!r:.80}")
    known = {f.name for f in fields(cls)}
    unknown = [k for k in data if k not in known]
    if unknown:
        raise ValueError(f"{name} has no field(s) {unknown!r:.80}")
    try:
        return cls(**{k: _from_wire(v) for k, v in data.items()})
    except TypeError as e:  # a missing field
        raise ValueError(f"bad {name}: {e}") from None


# ---- 判题调用的是下面的 run_ops，不用改它 ---------------------------------------------------
def _build(spec):
    """A test's description of a value -> the value: {"_type": name, ...} is a message of that
    registered class; "~name" is an unregistered dataclass that happens to be called name."""
    if isinstance(spec, dict) and TYPE_KEY in spec:
        name = spec[TYPE_KEY]
        kwargs = {k: _build(v) for k, v in spec.items() if k != TYPE_KEY}
        if name.startswith("~"):
            return make_dataclass(name[1:], list(kwargs))(**kwargs)
        return REGISTRY[name](**kwargs)
    if isinstance(spec, dict):
        return {k: _build(v) for k, v in spec.items()}
    if isinstance(spec, list):
        return [_build(v) for v in spec]
    return spec


def _plain(value):
    """What the judge compares: a registered message as {"_type": name, field: ...}."""
    if is_dataclass(value) and not isinstance(value, type):
        name = type(value).__name__
        if REGISTRY.get(name) is not type(value):
            return f"<{name} 不是已注册的消息类>"
        return {TYPE_KEY: name, **{f.name: _plain(getattr(value, f.name)) for f in fields(value)}}
    if isinstance(value, dict):
        return {"<dict>": {str(k): _plain(v) for k, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return {"<bytes>": value.hex()}
    return value


def _wire(frame):
    if not isinstance(frame, bytes):
        return f"<encode 应返回 bytes，实际是 {type(frame).__name__}>"
    try:
        return msgpack.unpackb(frame)
    except ValueError as e:
        return f"<encode 返回的不是一个 msgpack 值：{e}>"


def run_ops(ops: list) -> list:
    # ["encode", 消息]：encode 的结果用 msgpack 解开后的样子（线路格式）
    # ["decode", 帧的十六进制]：decode 的结果（消息写成 {"_type": 类名, 字段: 值}）
    # ["roundtrip", 消息]：decode(encode(消息)) 的结果
    # encode/decode 抛出 ValueError 时，这一项是 "ValueError"
    results = []
    for op, arg in ops:
        try:
            if op == "encode":
                results.append(_wire(encode(_build(arg))))
            elif op == "decode":
                results.append(_plain(decode(bytes.fromhex(arg))))
            elif op == "roundtrip":
                results.append(_plain(decode(encode(_build(arg)))))
            else:
                raise RuntimeError(f"unknown op {op!r}")
        except ValueError:
            results.append("ValueError")
    return results
