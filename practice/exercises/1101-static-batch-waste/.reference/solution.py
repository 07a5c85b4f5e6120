"""Reference solution of exercise 1101."""


def batch_cost(requests: list[list[int]], elapsed_s: float) -> dict:
    if not requests or elapsed_s <= 0:
        raise ValueError("need at least one request and a positive elapsed time")
    output_tokens = sum(out for _, out in requests)
    longest_in = max(inp for inp, _ in requests)
    longest_out = max(out for _, out in requests)
    static = len(requests) * (longest_in + longest_out)
    continuous = sum(inp + out for inp, out in requests)
    return {
        "output_tokens": output_tokens,
        "throughput": output_tokens / elapsed_s,
        "static_positions": static,
        "continuous_positions": continuous,
        "ratio": static / continuous,
    }
