"""Exercise 1201: registered dataclasses <-> msgpack frames; refuse whatever is not one of them."""

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
    # TODO 1: msgs 里的每一项都必须是已注册的类的实例（REGISTRY[类名] 就是它的类），否则 ValueError
    # TODO 2: 消息 -> {"_type": 类名, 字段名: 值, ...}；字段值里的消息同样处理，list/tuple -> list
    # TODO 3: 整个列表用 msgpack.packb 打包成一帧
    raise NotImplementedError("请实现 encode")


def decode(frame: bytes) -> list:
    # TODO 1: msgpack.unpackb 解不开、或者解出来不是 list：ValueError（绝不能用 pickle）
    # TODO 2: 每一项都必须是带 "_type" 的 map，类名已注册，键都是声明过的字段，没有默认值的字段都在
    # TODO 3: 字段值里（包括 list 和 map 里面）带 "_type" 的 map 按同样的规则解成消息
    # 任何不合规则的地方都抛 ValueError
    raise NotImplementedError("请实现 decode")


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
