"""Cases of exercise 2201. Expected values come from the model below: for every bucket it lists
the candidates that never failed there, then sorts them by (mean latency, name)."""

import random

from judgekit.case import Case


def bucket(n: int) -> int:
    b = 0 if n == 0 else 1
    while b < n:
        b *= 2
    return b


def model(traces):
    for t in traces:
        if t["status"] == "PASSED" and (t["latency_ms"] is None or t["latency_ms"] < 0):
            return "ValueError"
    out = []
    names = sorted({t["definition"] for t in traces})
    for name in names:
        mine = [t for t in traces if t["definition"] == name]
        for b in sorted({bucket(t["size"]) for t in mine}):
            here = [t for t in mine if bucket(t["size"]) == b]
            ranked = []
            for s in sorted({t["solution"] for t in here}):
                ts = [t for t in here if t["solution"] == s]
                if all(t["status"] == "PASSED" for t in ts):
                    ranked.append((sum(t["latency_ms"] for t in ts) / len(ts), s))
            if ranked:
                out.append([name, b, sorted(ranked)[0][1]])
    return out


def t(d, size, s, status="PASSED", ms=None):
    return {"definition": d, "size": size, "solution": s, "status": status,
            "latency_ms": ms if status == "PASSED" or ms is not None else None}


def _case(name, traces, visible=False) -> Case:
    expected = model(traces)
    if expected == "ValueError":
        return Case(name, {"traces": traces}, raises="ValueError", visible=visible)
    return Case(name, {"traces": traces}, expected, visible=visible)


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
    statuses = ["PASSED"] * 6 + ["INCORRECT_NUMERICAL", "RUNTIME_ERROR"]
    for i in range(6):
        traces = []
        for _ in range(rng.randint(1, 200)):
            status = rng.choice(statuses)
            traces.append(t(rng.choice(["rms", "attn", "silu"]), rng.randint(0, 600),
                            rng.choice(["torch", "triton", "cuda", "planted"]), status,
                            rng.choice([0.25, 0.5, 1.0, 1.5, 2.0]) if status == "PASSED" else None))
        out.append(_case(f"随机 {i + 1}", traces))
    return out
