"""Cases of exercise 2101. Expected values come from the model below, which finds a bucket by
doubling from 1 and keeps a per-definition list of kept keys, instead of bit tricks and sets."""

import random

from judgekit.case import Case


def bucket(n: int) -> int:
    if n == 0:
        return 0
    b = 1
    while b < n:
        b *= 2
    return b


def model(calls, dedup_axes, cap):
    if cap < 0 or any(v < 0 for _, axes in calls for v in axes.values()):
        return "ValueError"
    kept_keys: dict[str, list] = {}
    out = []
    for i, (name, axes) in enumerate(calls):
        mine = kept_keys.setdefault(name, [])
        if len(mine) >= cap:
            continue
        key = [bucket(axes[a]) for a in dedup_axes.get(name, []) if a in axes]
        if key in mine:
            continue
        mine.append(key)
        out.append(i)
    return out


def _case(name, calls, dedup_axes, cap, visible=False) -> Case:
    args = {"calls": calls, "dedup_axes": dedup_axes, "cap": cap}
    expected = model(calls, dedup_axes, cap)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def cases() -> list:
    rng = random.Random()
    a = [("a", {"n": n}) for n in [1, 1, 3, 4, 5]]
    out = [
        _case("示例 1：按桶去重", a, {"a": ["n"]}, 8, visible=True),
        _case("示例 2：名额 2", a, {"a": ["n"]}, 2, visible=True),
        _case("名额 0：一个不留", a, {"a": ["n"]}, 0),
        _case("桶 0 和桶 1 不同", [("a", {"n": 0}), ("a", {"n": 1}), ("a", {"n": 0})],
              {"a": ["n"]}, 4),
        _case("两个 Definition 各自计数",
              [("a", {"n": 2}), ("b", {"n": 2}), ("a", {"n": 2}), ("b", {"n": 9})],
              {"a": ["n"], "b": ["n"]}, 1),
        _case("多个轴", [("attn", {"bs": 2, "kv": 100}), ("attn", {"bs": 2, "kv": 120}),
                        ("attn", {"bs": 2, "kv": 130}), ("attn", {"bs": 3, "kv": 100})],
              {"attn": ["bs", "kv"]}, 8),
        _case("去重不看的轴", [("e", {"n": 3, "vocab": 10}), ("e", {"n": 4, "vocab": 99})],
              {"e": ["n"]}, 8),
        _case("缺的轴跳过", [("p", {"bs": 1}), ("p", {"bs": 1, "q": 7}), ("p", {"bs": 1, "q": 9})],
              {"p": ["bs", "q"]}, 8),
        _case("没登记的 Definition", [("x", {"n": 1}), ("x", {"n": 100})], {}, 8),
        _case("cap 为负", a, {"a": ["n"]}, -1),
        _case("负的轴", [("a", {"n": -3})], {"a": ["n"]}, 2),
        _case("空", [], {}, 3),
    ]
    for i in range(6):
        names = ["rms", "silu", "attn"]
        calls = [(rng.choice(names), {"n": rng.choice([0, rng.randint(1, 4096)]),
                                      "m": rng.randint(0, 300)}) for _ in range(rng.randint(1, 300))]
        axes = {"rms": ["n"], "silu": ["n", "m"], "attn": ["m"]}
        out.append(_case(f"随机 {i + 1}", calls, axes, rng.randint(1, 12)))
    return out
