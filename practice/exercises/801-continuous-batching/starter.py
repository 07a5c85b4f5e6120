"""Exercise 801: simulate a prefill-first continuous-batching scheduler, step by step."""


def simulate(requests: list[list[int]], budget: int, capacity: int) -> list:
    # 每个请求是 [arrival, prompt_len, output_len]，uid 是它在 requests 里的下标
    # TODO 1: 每一步开始时，arrival == 这一步的请求按 uid 顺序排到等待队列末尾
    # TODO 2: 从队头开始组 prefill 批次：预算、预留的 KV 容量都够才收，收不下就停（不跳过）
    # TODO 3: 有 prefill 批次就跑它；否则 decode 所有运行中的请求；都没有就是 idle
    # TODO 4: 生成够 output_len 个 token 的请求结束，释放它预留的容量
    return []
