"""Cases of exercise 801. Expected values come from the state-table model below: every step it
recomputes the waiting and running sets from per-request states (both are ordered by
(arrival, uid) because admission is first-come first-served and nothing is ever retracted), and
picks the prefill batch as the longest prefix of the waiting queue that passes both limits."""

import random

from judgekit.case import Case


def model(requests: list[list[int]], budget: int, capacity: int) -> list:
    n = len(requests)
    state = ["new"] * n  # new -> running -> done (no retraction)
    tokens = [0] * n
    steps = []
    t = 0
    while state.count("done") < n:
        order = sorted(range(n), key=lambda u: (requests[u][0], u))
        waiting = [u for u in order if state[u] == "new" and requests[u][0] <= t]
        running = [u for u in order if state[u] == "running"]
        free = capacity - sum(requests[u][1] + requests[u][2] for u in running)
        take = 0
        for m in range(len(waiting), 0, -1):  # the longest admissible prefix of the queue
            head = waiting[:m]
            need = sum(requests[u][1] + requests[u][2] for u in head)
            prompts = sum(requests[u][1] for u in head)
            if need <= free and (m == 1 or prompts <= budget):
                take = m
                break
        if take:
            kind, active = "prefill", waiting[:take]
        elif running:
            kind, active = "decode", running
        else:
            kind, active = "idle", []
        steps.append([kind, list(active)])
        for u in active:
            tokens[u] += 1
            state[u] = "done" if tokens[u] == requests[u][2] else "running"
        t += 1
    return steps


def _case(name, requests, budget, capacity, visible=False) -> Case:
    args = {"requests": [list(r) for r in requests], "budget": budget, "capacity": capacity}
    return Case(name, args, model(args["requests"], budget, capacity), visible=visible)


def _random(rng, name, n, max_arrival, max_prompt, max_output, budget, slack) -> Case:
    requests = [[rng.randint(0, max_arrival), rng.randint(1, max_prompt),
                 rng.randint(1, max_output)] for _ in range(n)]
    capacity = max(p + o for _, p, o in requests) + slack
    return _case(name, requests, budget, capacity)


def cases() -> list:
    rng = random.Random(801)
    out = [
        _case("示例 1：预算、容量、只要 1 个 token、超长 prompt 单独成批",
              [[0, 5, 3], [0, 4, 2], [1, 3, 1], [2, 10, 2]], 8, 20, visible=True),
        _case("示例 2：没有请求可做时空转", [[0, 2, 2], [5, 3, 1]], 4, 10, visible=True),
        _case("没有请求", [], 16, 100),
        _case("队头的大请求挡住后面的小请求（FIFO，不跳过）",
              [[0, 4, 4], [1, 8, 8], [1, 1, 1], [1, 1, 1]], 100, 20),
        _case("同一步到达的按 uid 排队，requests 不按到达时间排序",
              [[3, 2, 2], [0, 2, 3], [3, 1, 2], [0, 1, 1], [1, 6, 1]], 3, 12),
        _case("容量刚好够：prompt + output 等于剩余容量", [[0, 3, 3], [0, 2, 2], [0, 1, 1]], 100,
              10),
        _case("预算刚好用完", [[0, 4, 2], [0, 4, 2], [0, 1, 1]], 8, 100),
        _case("所有请求都只要 1 个 token", [[0, 3, 1], [0, 3, 1], [0, 3, 1], [2, 9, 1]], 6, 100),
    ]
    out += [
        _random(rng, "随机：宽松的容量", 12, 10, 20, 12, 32, 200),
        _random(rng, "随机：紧张的容量", 20, 15, 30, 20, 48, 10),
        _random(rng, "随机：很小的预算", 15, 20, 25, 8, 6, 60),
        _random(rng, "随机：同时到达", 25, 0, 40, 30, 64, 80),
        _random(rng, "随机：稀疏到达", 10, 60, 10, 5, 16, 5),
        _random(rng, "随机：大批量", 40, 30, 40, 30, 64, 150),
    ]
    return out
