"""Exercise 2601: per-output-channel symmetric quantization of a weight, and y = x W^T with it."""

import torch


def int8_linear(x: torch.Tensor, w: torch.Tensor, bits: int = 8) -> dict:
    # TODO 1: 参数检查：ValueError（bits 不在 2..8，w 不是二维浮点张量，x 的最后一维不等于 K）
    # TODO 2: qmax = 2 ** (bits - 1) - 1；每一行的 scale = 该行 max|w| / qmax（float32），全零的行 scale = 1
    # TODO 3: q = round(w / scale)（四舍六入五成双，即 torch.round），截到 [-qmax, qmax]，存成 int8
    # TODO 4: y = (x @ q^T) * scale：先在 float32 里求和，每行的和乘一次它的 scale
    # TODO 5: 返回 {"q": q, "scale": scale, "y": y}
    raise NotImplementedError("请实现 int8_linear")
