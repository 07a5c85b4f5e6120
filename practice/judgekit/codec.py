"""Values between the judge and the learner's process: tagged JSON plus one safetensors file.

Both formats are plain data, so the judge never runs or unpickles anything the learner's process
produced. Supported values: None, bool, int, float, str, bytes (base64 in the JSON), list, tuple,
dict with str keys, and torch tensors (saved by name in the safetensors file). torch is imported
only when a tensor is met, so exercises on plain Python values start their sandboxed process in
milliseconds.
"""

from __future__ import annotations

import base64
import sys

MAX_DEPTH = 16
MAX_ITEMS = 100_000


class EncodeError(ValueError):
    """A value that cannot cross the sandbox boundary (an unsupported type, too deep, too big)."""


def _is_tensor(value) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def encode(value, tensors: dict, prefix: str = "t") -> object:
    """Turn `value` into JSON-able data; tensors go into `tensors` (name -> contiguous CPU copy)."""
    count = [0]

    def walk(v, depth: int):
        count[0] += 1
        if depth > MAX_DEPTH or count[0] > MAX_ITEMS:
            raise EncodeError("返回值嵌套太深或元素太多")
        if v is None or isinstance(v, (bool, int, float, str)):
            return v
        if isinstance(v, bytes):
            return {"$bytes": base64.b64encode(v).decode("ascii")}
        if _is_tensor(v):
            name = f"{prefix}{len(tensors)}"
            tensors[name] = v.detach().to("cpu").contiguous().clone()
            return {"$tensor": name}
        if isinstance(v, (list, tuple)):
            items = [walk(x, depth + 1) for x in v]
            return items if isinstance(v, list) else {"$tuple": items}
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                raise EncodeError("字典的键必须是 str")
            return {"$dict": {k: walk(x, depth + 1) for k, x in v.items()}}
        raise EncodeError(f"不支持的返回值类型：{type(v).__module__}.{type(v).__qualname__}")

    return walk(value, 0)


def decode(data, tensors: dict):
    """The inverse of encode; `tensors` maps names to tensors loaded from the safetensors file."""
    if isinstance(data, list):
        return [decode(x, tensors) for x in data]
    if isinstance(data, dict):
        if set(data) == {"$tensor"}:
            return tensors[data["$tensor"]]
        if set(data) == {"$bytes"} and isinstance(data["$bytes"], str):
            return base64.b64decode(data["$bytes"], validate=True)
        if set(data) == {"$tuple"}:
            return tuple(decode(x, tensors) for x in data["$tuple"])
        if set(data) == {"$dict"}:
            return {str(k): decode(x, tensors) for k, x in data["$dict"].items()}
        raise ValueError(f"bad encoded value with keys {sorted(data)[:5]}")
    return data


def dump_tensors(tensors: dict) -> bytes:
    """The safetensors bytes of `tensors` (name -> CPU tensor)."""
    from safetensors.torch import save

    return save(tensors)


def load_tensors(data: bytes) -> dict:
    """Tensors from safetensors bytes (already read, size-checked, by the caller)."""
    from safetensors.torch import load

    return load(data)
