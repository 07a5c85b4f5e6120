"""Exercise 901: the chunks of one chunked-prefill batch, and how many batches a prompt needs."""


def chunk_plan(remaining: list[int], budget: int) -> list[int]:
    # TODO: 按顺序取请求；放得下就整个放进来，放不下就只放剩余预算那么多并结束这个批次
    raise NotImplementedError("请实现 chunk_plan")


def num_prefill_batches(prompt_len: int, budget: int) -> int:
    # TODO: 一个长度为 prompt_len 的 prompt 单独排队时，要几个 prefill 批次
    raise NotImplementedError("请实现 num_prefill_batches")


def plan(remaining: list[int], budget: int) -> dict:
    # 判题调用的是这个函数，不用改它
    if budget < 1:
        raise ValueError(f"budget must be >= 1, got {budget}")
    return {
        "chunks": chunk_plan(remaining, budget),
        "batches": [num_prefill_batches(n, budget) for n in remaining],
    }
