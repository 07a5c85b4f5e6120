"""RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, computed in fp32 whatever the input dtype."""

from __future__ import annotations

import torch

from minisgl.kernel import triton_for

from minisgl.trace.runtime import traced

from .base import BaseOP


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # >>> ch20
    if (fused := triton_for(x)) is not None:  # on a GPU: one Triton kernel does it (chapter 20)
        return fused.rms_norm(x, weight, eps)
    # <<< ch20
    # The same order of operations as Hugging Face, so bf16 outputs agree bit for bit:
    # normalise in fp32, round back to the input dtype, then scale by the weight.
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


class RMSNorm(BaseOP):
    def __init__(self, size: int, eps: float) -> None:
        self.weight = torch.empty(size)
        self.eps = eps

    @traced("rmsnorm")
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class RMSNormFused(RMSNorm):
    """RMSNorm that first adds the residual stream, as every pre-norm decoder layer does.

    Returns (norm(x + residual), x + residual). With residual=None (the first layer) the input
    itself becomes the residual. Fusing the add saves one pass over memory in a real kernel.
    """

    @traced("fused_add_rmsnorm")
    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        # >>> ch20
        if (fused := triton_for(x)) is not None:  # on a GPU: add and norm in one kernel (ch. 20)
            return fused.fused_add_rms_norm(x, residual, self.weight, self.eps)
        # <<< ch20
        if residual is not None:
            x = x + residual
        return rms_norm(x, self.weight, self.eps), x
