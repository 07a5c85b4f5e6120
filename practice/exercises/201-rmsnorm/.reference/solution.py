"""Reference solution of exercise 201."""

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None):
    dtype = x.dtype
    h = x.float()
    if residual is not None:
        h = h + residual.float()
        residual = h.to(dtype)
    scale = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)
    out = (h * scale * weight.float()).to(dtype)
    return out if residual is None else (out, residual)
