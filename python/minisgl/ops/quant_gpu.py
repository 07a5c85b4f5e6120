"""The GPU's implementations of the 8-bit linear ops (chapter 26).

int8 (weight-only): Triton kernels (kernel/triton/quant_linear.py) for every call on a GPU: one
token runs chapter 20's GEMV with row scales, its RMSNorm and SiLU-and-mul prologues included
(the fused ops); several tokens run a tiled tl.dot kernel that converts each int8 tile to the
activations' dtype on the way into the tensor cores.

fp8: each token's activations are quantized to e4m3 (one Triton kernel), then torch._scaled_mm
multiplies the two 8-bit matrices on the FP8 tensor cores with a scale per row of x and per
row of the weight (cuBLASLt's row-wise scaling), writing bf16. Its shapes must be multiples of
16 along K and N; other shapes, and other dtypes of x, run the reference. The fused fp8 ops
keep their references (the norm, then this): no kernel computes a norm and a scaled_mm at once.

All of them are switched off with the other Triton kernels by MINISGL_DISABLE_FUSED_KERNELS=1
(then the references run, with their dequantized copies).
"""

from __future__ import annotations

from typing import Any

import torch

from .quant_linear import FP8, INT8, quantize_fp8_rows
from .registry import Impl
from .triton_impls import fused_kernels_on, kernels, one_token


def linear_int8_triton(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                       bias: torch.Tensor | None) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] == 1 and rows.is_contiguous():
        out = kernels().gemv_int8(rows, weight, scale, bias)
    else:
        out = kernels().gemm_int8(rows.contiguous(), weight, scale, bias)
    return out.reshape(*x.shape[:-1], weight.shape[0])


def norm_linear_int8_gemv(x: torch.Tensor, residual: torch.Tensor | None,
                          norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
                          scale: torch.Tensor, bias: torch.Tensor | None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    return kernels().gemv_int8_rmsnorm(x, weight, scale, bias, norm_weight, eps, residual)


def silu_linear_int8_gemv(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                          bias: torch.Tensor | None) -> torch.Tensor:
    return kernels().gemv_int8_silu_and_mul(x, weight, scale, bias)


def quantize_fp8_rows_triton(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return kernels().quantize_fp8_rows(x)


def scaled_mm_fits(x: torch.Tensor, weight: torch.Tensor, *_: Any) -> bool:
    """What torch._scaled_mm with row-wise scales takes: e4m3 operands on a GPU, K and N
    multiples of 16; x in bf16 (its output dtype) or another float dtype converted after."""
    return (x.is_cuda and weight.dtype == FP8.dtype and weight.shape[0] % 16 == 0
            and weight.shape[1] % 16 == 0 and x.is_floating_point())


def linear_fp8_scaled_mm(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                         bias: torch.Tensor | None) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1])
    xq, sx = quantize_fp8_rows(rows.contiguous())
    # weight.t() is [K, N] column-major, the layout cuBLASLt wants for the second operand
    out = torch._scaled_mm(xq, weight.t(), scale_a=sx, scale_b=scale.view(1, -1),
                           out_dtype=torch.bfloat16)
    if bias is not None:
        out = out + bias.to(out.dtype)
    return out.to(x.dtype).reshape(*x.shape[:-1], weight.shape[0])


# (Each op is int8's own, so its weight is int8: the checks look at x only, and the fused ops'
# second argument is the residual, not the weight.)
INT8.linear.add(Impl("triton", linear_int8_triton, available=fused_kernels_on))
INT8.norm_linear.add(Impl("triton", norm_linear_int8_gemv, takes=one_token,
                          available=fused_kernels_on))
INT8.silu_linear.add(Impl("triton", silu_linear_int8_gemv, takes=one_token,
                          available=fused_kernels_on))
quantize_fp8_rows.add(Impl("triton", quantize_fp8_rows_triton, available=fused_kernels_on))
FP8.linear.add(Impl("scaled_mm", linear_fp8_scaled_mm, takes=scaled_mm_fits,
                    available=fused_kernels_on))
