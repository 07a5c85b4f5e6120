"""Cases of exercise 2201. Expected values come from the model below: for every bucket it lists
the candidates that never failed there, sorts them by (mean latency, name), and keeps the
definition's default when it is a candidate and the first is not at least 20% faster."""

import random

from judgekit.case import Case


def bucket(n: int) -> int:
    b = 0 if n == 0 else 1
    while b < n:
        b *= 2
    return b


def candidates(traces) -> dict:
    """(definition, bucket) -> {solution: mean latency} over the solutions that never failed
    there (a bucket where every solution failed has an empty dict)."""
    out = {}
    for name in sorted({t["definition"] for t in traces}):
        mine = [t for t in traces if t["definition"] == name]
        for b in sorted({bucket(t["size"]) for t in mine}):
            here = [t for t in mine if bucket(t["size"]) == b]
            means = {}
            for s in sorted({t["solution"] for t in here}):
                ts = [t for t in here if t["solution"] == s]
                if all(t["status"] == "PASSED" for t in ts):
                    means[s] = sum(t["latency_ms"] for t in ts) / len(ts)
            out[(name, b)] = means
    return out


def model(traces, defaults=None):
    for t in traces:
        if t["status"] == "PASSED" and (t["latency_ms"] is None or t["latency_ms"] < 0):
            return "ValueError"
    out = []
    for (name, b), means in candidates(traces).items():
        if not means:
            continue
        first = sorted((ms, s) for s, ms in means.items())[0][1]
        default = (defaults or {}).get(name)
        if default in means and means[first] > 0.8 * means[default]:
            first = default
        out.append([name, b, first])
    return out


def near_the_line(traces, defaults) -> bool:
    """A bucket whose fastest sits within 1e-9 of 0.8 x its default: rounding decides the
    answer there, so random cases avoid it (the hand-written one is exact in binary)."""
    return any(defaults.get(name) in means
               and abs(min(means.values()) - 0.8 * means[defaults[name]]) < 1e-9
               for (name, _), means in candidates(traces).items())


def t(d, size, s, status="PASSED", ms=None):
    return {"definition": d, "size": size, "solution": s, "status": status,
            "latency_ms": ms if status == "PASSED" or ms is not None else None}


def _case(name, traces, visible=False, defaults=None) -> Case:
    expected = model(traces, defaults)
    args = {"traces": traces} if defaults is None else {"traces": traces, "defaults": defaults}
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def cases() -> list:
    rng = random.Random()
    ex = [t("d", 3, "torch", ms=2.0), t("d", 4, "fast", "INCORRECT_NUMERICAL"),
          t("d", 4, "fast", ms=0.1), t("d", 9, "fast", ms=0.1)]
    out = [
        _case("示例：错过一次就出局", ex, visible=True),
        _case("空", [], visible=True),
        _case("全都失败", [t("d", 1, "a", "RUNTIME_ERROR"), t("d", 1, "b", "INCORRECT_SHAPE")]),
        _case("平均而不是最好的一次", [t("d", 5, "a", ms=0.1), t("d", 6, "a", ms=9.0),
                                 t("d", 7, "b", ms=1.0), t("d", 8, "b", ms=1.0)]),
        _case("延迟相同按名字", [t("d", 2, "zeta", ms=1.0), t("d", 2, "alpha", ms=1.0)]),
        _case("桶 0", [t("d", 0, "a", ms=1.0), t("d", 1, "b", ms=0.5)]),
        _case("快但错的解在别的桶照样可选", [t("d", 16, "fast", "INCORRECT_NUMERICAL"),
                                      t("d", 16, "torch", ms=3.0), t("d", 17, "fast", ms=0.2),
                                      t("d", 17, "torch", ms=6.0)]),
        _case("PASSED 没有延迟", [t("d", 1, "a", ms=None)]),
        _case("延迟为负", [t("d", 1, "a", ms=-1.0)]),
        _case("两个 Definition", [t("x", 1, "a", ms=1.0), t("y", 1, "a", "RUNTIME_ERROR"),
                                 t("y", 1, "b", ms=5.0)]),
    ]
    mg = [t("d", 2, "torch", ms=0.9), t("d", 2, "triton", ms=1.0), t("d", 8, "torch", ms=0.5),
          t("d", 8, "triton", ms=1.0)]
    out += [
        _case("示例：默认解快不到 20% 就留着", mg, visible=True, defaults={"d": "triton"}),
        _case("正好快 20%：换", [t("d", 4, "triton", ms=1.0), t("d", 4, "torch", ms=0.8)],
              defaults={"d": "triton"}),
        _case("默认解在这个桶错过：选最快的", [t("d", 4, "triton", "RUNTIME_ERROR"),
                                      t("d", 4, "triton", ms=1.0), t("d", 4, "torch", ms=0.95)],
              defaults={"d": "triton"}),
        _case("默认解在这个桶没有 trace", [t("d", 4, "torch", ms=0.95), t("d", 4, "cuda", ms=1.0)],
              defaults={"d": "triton"}),
        _case("默认解本来就最快", [t("d", 1, "triton", ms=0.5), t("d", 1, "torch", ms=1.0)],
              defaults={"d": "triton"}),
        _case("defaults 只管自己的 Definition", [t("x", 1, "torch", ms=0.95), t("x", 1, "triton", ms=1.0),
                                             t("y", 1, "torch", ms=0.95), t("y", 1, "triton", ms=1.0)],
              defaults={"y": "triton"}),
        _case("defaults 为空", [t("d", 1, "torch", ms=0.95), t("d", 1, "triton", ms=1.0)],
              defaults={}),
    ]
    statuses = ["PASSED"] * 6 + ["INCORRECT_NUMERICAL", "RUNTIME_ERROR"]
    for i in range(6):
        traces = []
        for _ in range(rng.randint(1, 200)):
            status = rng.choice(statuses)
            traces.append(t(rng.choice(["rms", "attn", "silu"]), rng.randint(0, 600),
                            rng.choice(["torch", "triton", "cuda", "planted"]), status,
                            rng.choice([0.25, 0.5, 1.0, 1.5, 2.0]) if status == "PASSED" else None))
        out.append(_case(f"随机 {i + 1}", traces))
    for i in range(4):  # with defaults, latencies from a wide range (no ties on the 0.8 line)
        while True:
            traces = []
            for _ in range(rng.randint(1, 200)):
                status = rng.choice(statuses)
                traces.append(t(rng.choice(["rms", "attn"]), rng.randint(0, 600),
                                rng.choice(["torch", "triton", "cuda"]), status,
                                round(rng.uniform(0.1, 2.0), 3) if status == "PASSED" else None))
            defaults = {"rms": "triton", "attn": rng.choice(["torch", "cuda"])}
            if not near_the_line(traces, defaults):
                break
        out.append(_case(f"随机，带默认解 {i + 1}", traces, defaults=defaults))
    return out
