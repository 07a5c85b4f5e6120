"""A linear layer together with the op before it (chapter 20): fused_add_rms_norm then linear,
silu_and_mul then linear.

A batch-1 decode step on a GPU is bound by how many kernels it launches, and there chapter 20's
GEMV computes the norm, or the activation, of its one input row itself (ops/triton_impls.py):
three launches fewer per decoder layer. Everywhere else (more tokens, a CPU) the reference runs:
the two plain ops in the same order as the unfused layers, so the results are the same, bit for
bit, and a trace still sees (and may swap) the plain ops.
"""

from __future__ import annotations

import torch

from .activation import silu_and_mul
from .linear import linear
from .norm import fused_add_rms_norm
from .registry import Op


def fused_add_rms_norm_linear_torch(x: torch.Tensor, residual: torch.Tensor | None,
                                    norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
                                    bias: torch.Tensor | None
                                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(linear(rms_norm(x + residual)), x + residual): a pre-norm layer's norm and the projection
    that reads it (qkv_proj, gate_up_proj)."""
    normed, residual = fused_add_rms_norm(x, residual, norm_weight, eps)
    return linear(normed, weight, bias), residual


def silu_and_mul_linear_torch(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
                              ) -> torch.Tensor:
    """linear(silu_and_mul(x)): the MLP's activation and down_proj."""
    return linear(silu_and_mul(x), weight, bias)


fused_add_rms_norm_linear = Op("fused_add_rmsnorm_linear", fused_add_rms_norm_linear_torch)
silu_and_mul_linear = Op("silu_and_mul_linear", silu_and_mul_linear_torch)
