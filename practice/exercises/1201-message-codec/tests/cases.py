"""Cases of exercise 1201. Expected values come from the model below, which never builds an
object: a message is its wire map, checked against a table of type names and fields (with the one
default). Frames are made here with msgpack.packb and pickle.dumps (pickle only ever writes bytes
here; nothing is unpickled). Frames travel to the learner's process as hex strings."""

import copy
import pickle
import random

import msgpack
from judgekit.case import Case

ERR = "ValueError"
REQUIRED = object()
TYPES = {
    "Sampling": {"temperature": REQUIRED, "max_tokens": REQUIRED, "stop": REQUIRED},
    "AddReq": {"uid": REQUIRED, "input_ids": REQUIRED, "sampling": REQUIRED},
    "TokenOut": {"uid": REQUIRED, "token": REQUIRED, "text": REQUIRED, "finished": False},
    "Abort": {"uid": REQUIRED},
}


class Bad(Exception):
    pass


# ---- the model ---------------------------------------------------------------------------------
def _foreign(spec) -> bool:
    if isinstance(spec, dict):
        name = spec.get("_type")
        return (isinstance(name, str) and name.startswith("~")) or any(map(_foreign, spec.values()))
    if isinstance(spec, list):
        return any(map(_foreign, spec))
    return False


def model_encode(msgs: list):
    """The wire form of a list of message descriptions, or ERR."""
    for m in msgs:
        if not (isinstance(m, dict) and m.get("_type") in TYPES):
            return ERR
    if _foreign(msgs):
        return ERR
    return copy.deepcopy(msgs)


def _message(item) -> dict:
    if not isinstance(item, dict) or "_type" not in item:
        raise Bad
    name = item["_type"]
    if not isinstance(name, str) or name not in TYPES:
        raise Bad
    schema = TYPES[name]
    out = {"_type": name}
    for key, value in item.items():
        if key == "_type":
            continue
        if key not in schema:
            raise Bad
        out[key] = _value(value)
    for key, default in schema.items():
        if key not in out:
            if default is REQUIRED:
                raise Bad
            out[key] = default
    return out


def _value(value):
    if isinstance(value, dict):
        if "_type" in value:
            return _message(value)
        return {"<dict>": {str(k): _value(v) for k, v in value.items()}}
    if isinstance(value, list):
        return [_value(v) for v in value]
    return value


def model_decode(frame: bytes):
    try:
        raw = msgpack.unpackb(frame)
    except ValueError:
        return ERR
    if not isinstance(raw, list):
        return ERR
    try:
        return [_message(item) for item in raw]
    except Bad:
        return ERR


def expected(ops: list) -> list:
    out = []
    for op, arg in ops:
        if op == "encode":
            out.append(model_encode(arg))
        elif op == "decode":
            out.append(model_decode(bytes.fromhex(arg)))
        else:
            wire = model_encode(arg)
            out.append(wire if wire == ERR else model_decode(msgpack.packb(wire)))
    return out


# ---- building cases ----------------------------------------------------------------------------
def _case(name, ops, visible=False) -> Case:
    ops = [[op, arg.hex() if isinstance(arg, bytes) else arg] for op, arg in ops]
    return Case(name, {"ops": ops}, expected(ops), visible=visible)


def pack(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def sampling(temperature=0.7, max_tokens=16, stop=None) -> dict:
    return {"_type": "Sampling", "temperature": temperature, "max_tokens": max_tokens,
            "stop": list(stop or [])}


def add_req(uid, input_ids, **kw) -> dict:
    return {"_type": "AddReq", "uid": uid, "input_ids": list(input_ids), "sampling": sampling(**kw)}


def token_out(uid, token, text, finished=False) -> dict:
    return {"_type": "TokenOut", "uid": uid, "token": token, "text": text, "finished": finished}


def abort(uid) -> dict:
    return {"_type": "Abort", "uid": uid}


CHARS = "abcxyz 你好。\n\t#😀\"'\\\x00é"


def _text(rng, lo=0, hi=8) -> str:
    return "".join(rng.choice(CHARS) for _ in range(rng.randint(lo, hi)))


def _random_message(rng) -> dict:
    kind = rng.choice(["AddReq", "TokenOut", "TokenOut", "Abort", "Sampling"])
    uid = rng.choice([0, 1, rng.randint(0, 1000), rng.randint(0, 2**40), -1])
    temperature = rng.choice([0.0, 1.0, rng.random() * 2])
    stop = [_text(rng, 1, 4) for _ in range(rng.randint(0, 3))]
    if kind == "AddReq":
        ids = [rng.randrange(152000) for _ in range(rng.randint(0, 24))]
        return add_req(uid, ids, temperature=temperature, max_tokens=rng.randint(1, 4096), stop=stop)
    if kind == "TokenOut":
        return token_out(uid, rng.randrange(152000), _text(rng), rng.random() < 0.3)
    if kind == "Sampling":
        return sampling(temperature, rng.randint(1, 4096), stop)
    return abort(uid)


def _random_msgs(rng, hi=6) -> list:
    return [_random_message(rng) for _ in range(rng.randint(0, hi))]


def _mutate(rng, msgs: list) -> bytes:
    """A frame made from msgs with one thing changed; most changes make it invalid."""
    msgs = copy.deepcopy(msgs) or [abort(7)]
    m = rng.choice(msgs)
    kind = rng.choice(["type", "extra", "missing", "default", "nested", "type_not_str",
                       "not_list", "truncate", "extra_bytes", "pickle", "item", "none"])
    if kind == "type":
        m["_type"] = rng.choice(["Exec", "abort", "Abort ", "os.system", "", "Sampling2"])
    elif kind == "extra":
        m[rng.choice(["__class__", "cmd", "seed", "Uid", "_type2"])] = rng.randint(0, 9)
    elif kind == "missing":
        del m[rng.choice([k for k in m if k not in ("_type", "finished")] or ["_type"])]
    elif kind == "default":
        m.pop("finished", None)
    elif kind == "nested":
        target = next((x for x in msgs if x["_type"] == "AddReq"), None)
        if target is None:
            target = add_req(1, [1, 2])
            msgs.append(target)
        choice = rng.randrange(3)
        if choice == 0:
            target["sampling"]["_type"] = "Evil"
        elif choice == 1:
            target["sampling"]["seed"] = 1
        else:
            target["input_ids"].append({"_type": "Exec", "cmd": "rm -rf ~"})
    elif kind == "type_not_str":
        m["_type"] = rng.choice([1, None, b"Abort", ["Abort"]])
    elif kind == "not_list":
        return pack(rng.choice([m, {"msgs": msgs}, len(msgs), "Abort", None]))
    elif kind == "truncate":
        frame = pack(msgs)
        return frame[: rng.randrange(len(frame))]
    elif kind == "extra_bytes":
        return pack(msgs) + bytes([rng.randrange(256)])
    elif kind == "pickle":
        return pickle.dumps(msgs, protocol=rng.choice([0, 2, 4, 5]))
    elif kind == "item":
        msgs.insert(rng.randint(0, len(msgs)), rng.choice([1, "Abort", [abort(1)], {}, {"uid": 1}]))
    return pack(msgs)


def cases() -> list:
    rng = random.Random(1201)
    example = [add_req(1, [151644, 872, 198], temperature=0.0, max_tokens=8, stop=["\n\n"]),
               token_out(1, 9707, "Hello"), abort(2)]
    out = [
        _case("示例 1：编码、往返", [["encode", example], ["roundtrip", example]], visible=True),
        _case("示例 2：拒绝 pickle、未知类型、未知字段、缺字段、不是列表", [
            ["decode", pickle.dumps([abort(3)])],
            ["decode", pack([{"_type": "Exec", "cmd": "rm -rf ~"}])],
            ["decode", pack([{"_type": "Abort", "uid": 3, "cmd": "ls"}])],
            ["decode", pack([{"_type": "TokenOut", "uid": 1, "text": "hi"}])],
            ["decode", pack({"_type": "Abort", "uid": 3})],
            ["decode", pack([{"_type": "TokenOut", "uid": 1, "token": 5, "text": "hi"}])],
        ], visible=True),
        _case("空列表", [["encode", []], ["roundtrip", []], ["decode", pack([])]]),
        _case("有默认值的字段可以省略，其余不行", [
            ["decode", pack([{"_type": "TokenOut", "uid": 4, "token": 0, "text": ""}])],
            ["decode", pack([{"_type": "TokenOut", "uid": 4, "token": 0, "text": "", "finished": True}])],
            ["decode", pack([{"_type": "TokenOut", "uid": 4, "token": 0, "finished": False}])],
            ["decode", pack([{"_type": "Abort"}])],
            ["decode", pack([{"_type": "AddReq", "uid": 1, "input_ids": [1]}])],
        ]),
        _case("帧不是列表", [["decode", pack(x)] for x in
                             [abort(1), None, 5, "Abort", b"\x90", {"msgs": [abort(1)]}, 1.5, True]]),
        _case("列表里不是消息", [["decode", pack(x)] for x in [
            [1], [{}], [{"uid": 1}], [abort(1), "Abort"], [[abort(1)]], [{"_type": 1, "uid": 1}],
            [{"_type": None}], [{"_type": b"Abort", "uid": 1}], [{"_type": ["Abort"], "uid": 1}],
            [{"_type": "abort", "uid": 1}], [{"_type": "Abort ", "uid": 1}],
        ]]),
        _case("未知字段（包括像内部属性的名字、bytes 或整数的键）", [["decode", f] for f in [
            pack([{"_type": "Abort", "uid": 1, "__class__": "os.system"}]),
            pack([{"_type": "Abort", "uid": 1, "__dict__": {}}]),
            pack([{"_type": "Abort", "uid": 1, "Uid": 1}]),
            pack([{"_type": "Abort", b"uid": 1}]),
            b"\x82\xa5_type\xa5Abort\x01\x02",  # {"_type": "Abort", 1: 2}
            pack([{"_type": "TokenOut", "uid": 1, "token": 2, "text": "", "finished": True,
                   "logprob": -0.5}]),
        ]]),
        _case("嵌套的消息也要按规则检查", [
            ["decode", pack([add_req(5, [1, 2, 3])])],
            ["decode", pack([{**add_req(5, [1]), "sampling": {**sampling(), "_type": "Evil"}}])],
            ["decode", pack([{**add_req(5, [1]), "sampling": {**sampling(), "seed": 0}}])],
            ["decode", pack([{**add_req(5, [1]), "sampling": {"_type": "Sampling"}}])],
            ["decode", pack([{**add_req(5, [1, {"_type": "Exec", "cmd": "ls"}])}])],
            ["decode", pack([{**add_req(5, [1, {"_type": "Abort", "uid": 6}])}])],
            ["decode", pack([sampling(1.0, 3, ["a"])])],
        ]),
        _case("不是 msgpack 的字节：pickle、截断、多余的字节", [["decode", f] for f in [
            pickle.dumps([abort(3)], protocol=0),
            pickle.dumps([abort(3)], protocol=2),
            pickle.dumps([abort(3)], protocol=5),
            pickle.dumps([token_out(1, 2, "x")]),
            b"",
            b"\xc1",
            pack([abort(3)])[:-1],
            pack([abort(3)]) + b"\x90",
            pack([abort(3)]) * 2,
            b"\x91\xa2\xff\xfe",  # a string that is not UTF-8
        ]]),
        _case("编码时也只收已注册的消息", [
            ["encode", [{"_type": "~Abort", "uid": 1}]],
            ["encode", [abort(1), {"_type": "~TokenOut", "uid": 1, "token": 2, "text": "",
                                   "finished": False}]],
            ["encode", [{"uid": 1}]],
            ["encode", [abort(1), 5]],
            ["encode", ["Abort"]],
            ["encode", [{**add_req(1, [1]), "sampling": {"_type": "~Sampling", "temperature": 1.0,
                                                         "max_tokens": 1, "stop": []}}]],
            ["encode", [abort(1)]],
        ]),
        _case("很大的整数和各种 Unicode", [
            ["roundtrip", [abort(2**63 - 1), abort(-2**63), token_out(0, 0, "你好😀\x00\n\"\\")]],
            ["encode", [add_req(2**40, [0, 151999, 2**31], temperature=1e-300, max_tokens=1,
                                stop=["。", "😀", "</s>"])]],
            ["roundtrip", [sampling(2.0, 2**32, ["\n" * 3])]],
        ]),
    ]
    for i in range(3):
        ops = [["roundtrip", _random_msgs(rng)] for _ in range(30)]
        ops += [["encode", _random_msgs(rng)] for _ in range(10)]
        out.append(_case(f"随机：编码与往返 #{i + 1}", ops))
    out.append(_case("随机：合法的帧", [["decode", pack(_random_msgs(rng, 8))] for _ in range(40)]))
    for i in range(4):
        ops = [["decode", _mutate(rng, _random_msgs(rng, 5))] for _ in range(40)]
        out.append(_case(f"随机：改动过的帧 #{i + 1}", ops))
    return out
