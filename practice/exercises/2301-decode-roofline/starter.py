"""Exercise 2301: bytes, FLOPs and the bound of one decode step."""


def decode_step(cfg: dict, batch: int, context: int, dtype_bytes: int,
                bytes_per_s: int, flops_per_s: int) -> dict:
    # TODO 1: 参数检查：ValueError
    # TODO 2: params = 每层 (qkv + o + 3 个 MLP 矩阵) x 层数 + LM head
    # TODO 3: step_bytes = 权重读一次 + 每个请求读自己的 K/V
    # TODO 4: step_flops = batch x (2 x params + 4 x layers x qo_heads x head_dim x context)
    # TODO 5: bound：用整数比较 step_flops x bytes_per_s 和 flops_per_s x step_bytes
    raise NotImplementedError("请实现 decode_step")
