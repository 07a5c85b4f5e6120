"""The Triton kernels of chapter 20 (minisgl.kernel.triton) as faster implementations of the
small ops of a decoder layer, of its one-token projections and of the sampler (one draw per row).

They take GPU tensors; the GEMVs only one contiguous token [1, K] (a batch-1 decode step, where
cuBLAS's kernels for one row leave much of the memory bandwidth unused). They are available
unless MINISGL_DISABLE_FUSED_KERNELS=1, which keeps the torch code on a GPU too (read once).
Triton itself is imported on the first call that runs a kernel: importing it takes about half a
second, and a CPU never needs it.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType
from typing import Any

import torch

from minisgl.env import load_env

from .activation import silu_and_mul
from .fused_linear import fused_add_rms_norm_linear, silu_and_mul_linear
from .linear import linear
from .norm import fused_add_rms_norm, rms_norm
from .registry import Impl
from .rope import rope
from .sampling import sample


@cache
def fused_kernels_on() -> bool:
    return not load_env().disable_fused_kernels


@cache
def kernels() -> ModuleType:
    from minisgl.kernel import triton

    return triton


def one_token(x: torch.Tensor, *_: Any) -> bool:
    """One contiguous token on a GPU: what the GEMVs take."""
    return x.is_cuda and x.dim() == 2 and x.shape[0] == 1 and x.is_contiguous()


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return kernels().rms_norm(x, weight, eps)


def fused_add_rms_norm_triton(x: torch.Tensor, residual: torch.Tensor | None,
                              weight: torch.Tensor, eps: float
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    return kernels().fused_add_rms_norm(x, residual, weight, eps)


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    return kernels().silu_and_mul(x)


def sample_triton(logits: torch.Tensor, temperature: torch.Tensor, seed32: torch.Tensor,
                  positions: torch.Tensor) -> torch.Tensor:
    return kernels().sample(logits, temperature, seed32, positions)


def rope_triton(*args: Any) -> tuple[torch.Tensor, torch.Tensor]:
    return kernels().qk_norm_rope(*args)  # the q/k norm too, in the same kernel


def linear_gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
                ) -> torch.Tensor:
    return kernels().gemv(x, weight, bias)


def fused_add_rms_norm_linear_gemv(x: torch.Tensor, residual: torch.Tensor | None,
                                   norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
                                   bias: torch.Tensor | None
                                   ) -> tuple[torch.Tensor, torch.Tensor]:
    return kernels().gemv_rmsnorm(x, weight, bias, norm_weight, eps, residual)


def silu_and_mul_linear_gemv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
                             ) -> torch.Tensor:
    return kernels().gemv_silu_and_mul(x, weight, bias)


for _op, _fn in [(rms_norm, rms_norm_triton), (fused_add_rms_norm, fused_add_rms_norm_triton),
                 (silu_and_mul, silu_and_mul_triton), (rope, rope_triton),
                 (sample, sample_triton)]:
    _op.add(Impl("triton", _fn, available=fused_kernels_on))
for _op, _fn in [(linear, linear_gemv),
                 (fused_add_rms_norm_linear, fused_add_rms_norm_linear_gemv),
                 (silu_and_mul_linear, silu_and_mul_linear_gemv)]:
    _op.add(Impl("triton", _fn, takes=one_token, available=fused_kernels_on))
