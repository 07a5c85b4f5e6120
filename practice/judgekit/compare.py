"""Comparing the learner's value with the expected one, and showing values to a person.

The learner's value is data the learner chose, so nothing here may assume it is reasonable: an
int too large for a float (10 ** 400), NaN, infinities, a structure nested deeper than repr()
can walk. Comparisons are driven by the expected value's shape, numbers are compared without
converting the learner's int to a float unless it fits, and every value shown goes through
_short(), which never raises and never returns more than MAX_REPR characters. The runner still
treats any exception raised here as a wrong answer (runner.check_value).
"""

from __future__ import annotations

import math
import sys

MAX_SHOWN = 6  # tensor elements shown
MAX_LINES = 24  # lines per described value
MAX_REPR = 300  # characters of one value's repr
MAX_DEPTH = 12  # levels of nested containers described


def _torch():
    return sys.modules.get("torch")


def _is_tensor(value) -> bool:
    torch = _torch()
    return torch is not None and isinstance(value, torch.Tensor)


def _fmt_number(x) -> str:
    if isinstance(x, bool) or isinstance(x, int):
        return str(x)
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return f"{x:.6g}"


def describe_tensor(t) -> str:
    flat = t.detach().reshape(-1)
    head = ", ".join(_fmt_number(v) for v in flat[:MAX_SHOWN].tolist())
    more = ", ..." if flat.numel() > MAX_SHOWN else ""
    dtype = str(t.dtype).removeprefix("torch.")
    return f"tensor(shape={list(t.shape)}, dtype={dtype}) [{head}{more}]"


def _short(value) -> str:
    """repr(value), cut to MAX_REPR characters; never raises (repr of a list nested thousands
    deep raises RecursionError, of an int with more than 4300 digits ValueError)."""
    try:
        text = repr(value)
    except Exception as e:  # noqa: BLE001
        return f"<{type(value).__name__}，无法显示：{type(e).__name__}>"
    return text if len(text) <= MAX_REPR else text[:MAX_REPR] + " ..."


def describe(value, indent: str = "") -> str:
    """A few readable lines: tensors as shape, dtype and their first values."""
    lines: list[str] = []

    def walk(v, pad: str, label: str, depth: int) -> None:
        if len(lines) > MAX_LINES:
            return
        if depth > MAX_DEPTH:
            lines.append(f"{pad}{label}...（嵌套太深）")
        elif isinstance(v, dict) and v and any(_is_tensor(x) or isinstance(x, (dict, list, tuple))
                                               for x in v.values()):
            lines.append(f"{pad}{label}{{")
            for k, x in v.items():
                walk(x, pad + "  ", f"{_short(k)}: ", depth + 1)
                if len(lines) > MAX_LINES:
                    break
            lines.append(f"{pad}}}")
        elif isinstance(v, (list, tuple)) and any(_is_tensor(x) for x in v):
            lines.append(f"{pad}{label}{'(' if isinstance(v, tuple) else '['}")
            for x in v:
                walk(x, pad + "  ", "", depth + 1)
                if len(lines) > MAX_LINES:
                    break
            lines.append(f"{pad}{')' if isinstance(v, tuple) else ']'}")
        elif _is_tensor(v):
            lines.append(f"{pad}{label}{describe_tensor(v)}")
        else:
            lines.append(f"{pad}{label}{_short(v)}")

    walk(value, indent, "", 0)
    if len(lines) > MAX_LINES:
        lines = lines[:MAX_LINES] + [indent + "..."]
    return "\n".join(lines)


def compare_tensors(expected, actual, atol: float, rtol: float) -> str | None:
    torch = _torch()
    if not _is_tensor(actual):
        return f"应为张量，实际是 {type(actual).__name__}"
    if tuple(actual.shape) != tuple(expected.shape):
        return f"形状不对：期望 {list(expected.shape)}，实际 {list(actual.shape)}"
    if actual.dtype != expected.dtype:
        return f"dtype 不对：期望 {expected.dtype}，实际 {actual.dtype}"
    if expected.numel() == 0:
        return None
    if expected.is_floating_point():
        e, a = expected.double(), actual.double()
        close = torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        if bool(close.all()):
            return None
        diff = (a - e).abs()
        diff = torch.where(torch.isnan(diff) | (diff == float("inf")), torch.full_like(diff, float("inf")),
                           diff)
        diff = torch.where(close, torch.zeros_like(diff), diff)
        worst = int(diff.reshape(-1).argmax())
        index = list(torch.unravel_index(torch.tensor(worst), expected.shape))
        where = [int(i) for i in index]
        bad = int((~close).sum())
        what = f"超出容差（atol={atol:g}, rtol={rtol:g}）" if atol or rtol else "不相等"
        return (f"{bad}/{expected.numel()} 个元素{what}；"
                f"max abs diff = {_fmt_number(float(diff.reshape(-1)[worst]))}，"
                f"位置 {where}：期望 {_fmt_number(float(e.reshape(-1)[worst]))}，"
                f"实际 {_fmt_number(float(a.reshape(-1)[worst]))}")
    equal = expected == actual
    if bool(equal.all()):
        return None
    worst = int((~equal).reshape(-1).nonzero()[0])
    where = [int(i) for i in torch.unravel_index(torch.tensor(worst), expected.shape)]
    return (f"{int((~equal).sum())}/{expected.numel()} 个元素不相等；位置 {where}："
            f"期望 {expected.reshape(-1)[worst].item()}，实际 {actual.reshape(-1)[worst].item()}")


def compare(expected, actual, atol: float = 0.0, rtol: float = 0.0, path: str = "返回值") -> str | None:
    """None when equal (within tolerance for float tensors), else a message naming the place."""
    if _is_tensor(expected):
        message = compare_tensors(expected, actual, atol, rtol)
        return None if message is None else f"{path}：{message}"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return f"{path}：应为 dict，实际是 {type(actual).__name__}"
        missing = [k for k in expected if k not in actual]
        extra = [k for k in actual if k not in expected]
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"缺少键 {_short(missing[:5])}{' ...' if len(missing) > 5 else ''}")
            if extra:
                parts.append(f"多出键 {_short(extra[:5])}{' ...' if len(extra) > 5 else ''}")
            return f"{path}：" + "，".join(parts)
        for k in expected:
            message = compare(expected[k], actual[k], atol, rtol, f"{path}[{_short(k)}]")
            if message:
                return message
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)):
            return f"{path}：应为 {type(expected).__name__}，实际是 {type(actual).__name__}"
        if len(actual) != len(expected):
            return f"{path}：长度不对：期望 {len(expected)}，实际 {len(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            message = compare(e, a, atol, rtol, f"{path}[{i}]")
            if message:
                return message
        return None
    if isinstance(expected, float) and isinstance(actual, (int, float)) and not isinstance(actual, bool):
        if _close(actual, expected, atol, rtol):
            return None
        return f"{path}：期望 {_short(expected)}，实际 {_short(actual)}"
    if type(actual) is not type(expected) or actual != expected:
        return f"{path}：期望 {_short(expected)}，实际 {_short(actual)}"
    return None


def _close(actual: int | float, expected: float, atol: float, rtol: float) -> bool:
    """|actual - expected| <= atol + rtol * |expected|, for any int or float the learner sent:
    an int beyond float's range (10 ** 400) is far from every finite float and is not
    converted (that would raise OverflowError); NaN matches only NaN, an infinity only itself."""
    if actual == expected:  # exact, also between an int and a float of any size
        return True
    if isinstance(actual, int):
        try:
            actual = float(actual)
        except OverflowError:
            return False
    if math.isnan(actual) or math.isnan(expected):
        return math.isnan(actual) and math.isnan(expected)
    if math.isinf(actual) or math.isinf(expected):
        return False  # unequal (checked above) and infinite: no tolerance covers it
    return abs(actual - expected) <= atol + rtol * abs(expected)


MAX_REGIONS_SHOWN = 6


def _first_difference(expected: bytes, actual: bytes) -> tuple[int, int]:
    """Offset of the first differing byte and how many bytes differ (same lengths)."""
    wrong = [i for i, (e, a) in enumerate(zip(expected, actual)) if e != a]
    return wrong[0], len(wrong)


def compare_bytes(expected: bytes, actual: bytes, regions=()) -> str | None:
    """None when `actual` is exactly `expected`; else the first few differing regions, each a
    (start, length, what) span of the data, described by what lies there."""
    if not isinstance(actual, bytes):
        return f"应为 {len(expected)} 字节的数据，实际是 {type(actual).__name__}"
    if len(actual) != len(expected):
        return f"数据的长度不对：期望 {len(expected)} 字节，实际 {len(actual)} 字节"
    if actual == expected:
        return None
    spans = list(regions) or [(0, len(expected), "数据")]
    bad = [(start, length, what) for start, length, what in spans
           if actual[start:start + length] != expected[start:start + length]]
    lines = []
    for start, length, what in bad[:MAX_REGIONS_SHOWN]:
        first, count = _first_difference(expected[start:start + length],
                                         actual[start:start + length])
        lines.append(f"{what}：从第 {first} 个字节起不对（期望 0x{expected[start + first]:02x}，"
                     f"实际 0x{actual[start + first]:02x}），这一段共有 {count} / {length} 个字节不对")
    if len(bad) > MAX_REGIONS_SHOWN:
        lines.append(f"……一共有 {len(bad)} 段不对")
    return "\n".join(lines) or "数据不对"
