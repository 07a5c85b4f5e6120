"""Exercise 2201: the solution apply runs for each definition and shape bucket."""


def choose(traces: list[dict], defaults: dict | None = None) -> list[tuple[str, int, str]]:
    # TODO 1: 桶 = size 向上取 2 的幂（0 -> 0）
    # TODO 2: 按 (definition, 桶, solution) 分组；PASSED 却没有延迟或延迟为负：ValueError
    # TODO 3: 组里有任何一条不是 PASSED 的解出局；其余按平均延迟、再按名字选最小
    # TODO 4: 默认解（defaults[definition]）也能选时，最快的要 <= 默认的 0.8 倍才换
    raise NotImplementedError("请实现 choose")
