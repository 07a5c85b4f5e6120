"""Exercise 2201: the solution apply runs for each definition and shape bucket."""


def choose(traces: list[dict]) -> list[tuple[str, int, str]]:
    # TODO 1: 桶 = size 向上取 2 的幂（0 -> 0）
    # TODO 2: 按 (definition, 桶, solution) 分组；PASSED 却没有延迟或延迟为负：ValueError
    # TODO 3: 组里有任何一条不是 PASSED 的解出局；其余按平均延迟、再按名字选最小
    raise NotImplementedError("请实现 choose")
