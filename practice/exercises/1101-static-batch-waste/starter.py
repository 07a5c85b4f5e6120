"""Exercise 1101: output throughput, and the token positions a static batch wastes."""


def batch_cost(requests: list[list[int]], elapsed_s: float) -> dict:
    # requests[i] = [input_len, output_len]
    # TODO 1: requests 为空或 elapsed_s <= 0 时抛 ValueError
    # TODO 2: output_tokens、throughput = output_tokens / elapsed_s
    # TODO 3: static_positions = 请求数 * (最长输入 + 最长输出)；continuous_positions = Σ(输入 + 输出)
    # TODO 4: ratio = static_positions / continuous_positions
    raise NotImplementedError("请实现 batch_cost")
