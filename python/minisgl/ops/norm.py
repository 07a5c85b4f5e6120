"""RMSNorm, alone and after the residual add of a pre-norm decoder layer."""

from __future__ import annotations

import torch

from .registry import Op


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """y = x / sqrt(mean(x^2) + eps) * weight over the last axis.

    The same order of operations as Hugging Face, so bf16 outputs agree bit for bit: normalise in
    fp32, round back to the input dtype, then scale by the weight."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def fused_add_rms_norm_torch(x: torch.Tensor, residual: torch.Tensor | None,
                             weight: torch.Tensor, eps: float
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual); with residual None (the first layer) x itself is
    the residual. A fused kernel does the add and the norm in one pass over memory."""
    if residual is not None:
        x = x + residual
    return rms_norm_torch(x, weight, eps), x


rms_norm = Op("rmsnorm", rms_norm_torch)
fused_add_rms_norm = Op("fused_add_rmsnorm", fused_add_rms_norm_torch)
