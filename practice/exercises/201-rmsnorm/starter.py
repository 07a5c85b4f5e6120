"""Exercise 201: RMSNorm with an optional fused residual add."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    # TODO 1: 记下输入的 dtype，把 x 转成 float32
    # TODO 2: 有 residual 时先相加，新的残差是和转回输入 dtype
    # TODO 3: out = h * rsqrt(mean(h^2, 最后一维) + eps) * weight，再转回输入 dtype
    # TODO 4: 没有 residual 时返回 out，有时返回 (out, 新的残差)
    raise NotImplementedError("请实现 rms_norm")
