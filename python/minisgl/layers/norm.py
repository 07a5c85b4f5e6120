"""RMSNorm layers: the weight and eps of one norm; ops.rms_norm computes it (in fp32 whatever the
input dtype, see ops/norm.py)."""

from __future__ import annotations

import torch

from minisgl import ops

from .base import BaseOP


class RMSNorm(BaseOP):
    def __init__(self, size: int, eps: float) -> None:
        self.weight = torch.empty(size)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.rms_norm(x, self.weight, self.eps)


class RMSNormFused(RMSNorm):
    """RMSNorm that first adds the residual stream, as every pre-norm decoder layer does.

    Returns (norm(x + residual), x + residual). With residual=None (the first layer) the input
    itself becomes the residual. Fusing the add saves one pass over memory in a real kernel.
    """

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        return ops.fused_add_rms_norm(x, residual, self.weight, self.eps)
