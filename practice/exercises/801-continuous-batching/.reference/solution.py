"""Reference solution of exercise 801."""

from collections import deque


def simulate(requests: list[list[int]], budget: int, capacity: int) -> list:
    arrivals = sorted(range(len(requests)), key=lambda u: (requests[u][0], u))
    arrivals = deque(arrivals)
    waiting: deque[int] = deque()
    running: list[int] = []
    produced = [0] * len(requests)
    reserved = 0
    finished = 0
    steps = []
    t = 0
    while finished < len(requests):
        while arrivals and requests[arrivals[0]][0] == t:
            waiting.append(arrivals.popleft())
        batch, left = [], budget
        while waiting:
            _, prompt_len, output_len = requests[waiting[0]]
            if batch and prompt_len > left:
                break
            if reserved + prompt_len + output_len > capacity:
                break
            uid = waiting.popleft()
            batch.append(uid)
            left -= prompt_len
            reserved += prompt_len + output_len
        if batch:
            steps.append(["prefill", batch])
            active = batch
            running += batch
        elif running:
            steps.append(["decode", list(running)])
            active = running
        else:
            steps.append(["idle", []])
            active = []
        done = []
        for uid in active:
            produced[uid] += 1
            if produced[uid] == requests[uid][2]:
                done.append(uid)
        for uid in done:
            running.remove(uid)
            reserved -= requests[uid][1] + requests[uid][2]
            finished += 1
        t += 1
    return steps
