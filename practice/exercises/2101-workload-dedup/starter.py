"""Exercise 2101: which op calls a trace capture keeps as workloads."""


def keep_workloads(calls: list[tuple[str, dict[str, int]]], dedup_axes: dict[str, list[str]],
                   cap: int) -> list[int]:
    # TODO 1: cap < 0 或轴的值为负：ValueError
    # TODO 2: bucket(n)：不小于 n 的最小 2 的幂，bucket(0) = 0
    # TODO 3: 从前往后：名额满了跳过；键 (name, 桶...) 见过跳过；否则留下并记下键
    raise NotImplementedError("请实现 keep_workloads")
