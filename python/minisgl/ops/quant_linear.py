"""Linear layers with 8-bit weights (chapter 26): the ops, their torch references, and the set of
ops each weight format runs.

A quantized weight is stored as 8-bit values q [N, K] and one fp32 scale per output row [N]: the
weight it stands for is q * scale[:, None]. Two formats:

- int8 (weight-only): y = x (q * scale)^T + b. The activations stay in the model's dtype; only
  the bytes read from memory shrink, which is what a batch-1 decode step waits for.
- fp8 (e4m3, "W8A8"): the activations are quantized too, per token at run time, so the product
  itself runs on FP8 tensor cores: y = (xq * sx) (q * scale)^T + b, with xq = x / sx rounded to
  e4m3 and sx = max|x_row| / 448 (448 is e4m3's largest value).

Like chapter 20's fused ops, each format has three ops: the projection, and the projection
together with the small op before it (the residual add and RMSNorm; SiLU-and-mul), so that the
one-token GEMV can compute its own input. Their references compose the plain ops in the same
order as an unquantized layer; the faster implementations live in quant_gpu.py (Triton int8
kernels, torch._scaled_mm for fp8) and quant_cpu.py (fbgemm's int8 matrix multiply).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .activation import silu_and_mul
from .norm import fused_add_rms_norm
from .registry import Op

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8_DTYPE).max  # 448.0
# A row of zeros (padding, a dead channel) gets this scale instead of 0: x / scale stays 0, not NaN
MIN_SCALE = 1e-12


def _finish(acc: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The fp32 product plus the bias, rounded once to the activations' dtype."""
    if bias is not None:
        acc = acc + bias.float()
    return acc.to(dtype)


def linear_int8_torch(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                      bias: torch.Tensor | None) -> torch.Tensor:
    """x [.., K] times the int8 weight [N, K] with its row scales [N]: sums in fp32, each row's
    sum times its scale, the bias added, one rounding to x's dtype. (This reference makes an fp32
    copy of the weight on every call: the faster implementations never do.)"""
    acc = F.linear(x.float(), weight.float()) * scale
    return _finish(acc, bias, x.dtype)


def quantize_fp8_rows_torch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token fp8 quantization of activations: (xq [M, K] e4m3, sx [M, 1] fp32) with
    x ~= xq * sx; each row's largest |value| maps to 448."""
    h = x.float()
    sx = (h.abs().amax(dim=-1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    return (h / sx).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), sx


def linear_fp8_torch(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                     bias: torch.Tensor | None) -> torch.Tensor:
    """x [.., K] quantized per token to e4m3, times the e4m3 weight [N, K]: the products of the
    8-bit values summed in fp32, times both scales, plus the bias, rounded to x's dtype."""
    shape = x.shape
    xq, sx = quantize_fp8_rows(x.reshape(-1, shape[-1]))
    acc = F.linear(xq.float(), weight.float()) * sx * scale
    return _finish(acc, bias, x.dtype).reshape(*shape[:-1], weight.shape[0])


quantize_fp8_rows = Op("quantize_fp8_rows", quantize_fp8_rows_torch)
linear_int8 = Op("linear_int8", linear_int8_torch)
linear_fp8 = Op("linear_fp8", linear_fp8_torch)


def _norm_then(linear: Op):
    def fused_add_rms_norm_linear(x: torch.Tensor, residual: torch.Tensor | None,
                                  norm_weight: torch.Tensor, eps: float, weight: torch.Tensor,
                                  scale: torch.Tensor, bias: torch.Tensor | None
                                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(linear(rms_norm(x + residual)), x + residual), as ops/fused_linear.py."""
        normed, residual = fused_add_rms_norm(x, residual, norm_weight, eps)
        return linear(normed, weight, scale, bias), residual

    return fused_add_rms_norm_linear


def _silu_then(linear: Op):
    def silu_and_mul_linear(x: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor,
                            bias: torch.Tensor | None) -> torch.Tensor:
        """linear(silu_and_mul(x)): the MLP's activation and down_proj."""
        return linear(silu_and_mul(x), weight, scale, bias)

    return silu_and_mul_linear


@dataclass(frozen=True)
class QuantScheme:
    """A weight format: its --quantization name, the dtype q is stored in, and the ops a linear
    layer with such a weight runs (each op takes the weight as q and its row scales)."""

    name: str
    dtype: torch.dtype
    linear: Op  # (x, q, scale, bias) -> y
    norm_linear: Op  # (x, residual, norm_weight, eps, q, scale, bias) -> (y, x + residual)
    silu_linear: Op  # (x, q, scale, bias) -> linear(silu_and_mul(x))


INT8 = QuantScheme("int8", torch.int8, linear_int8,
                   Op("fused_add_rmsnorm_linear_int8", _norm_then(linear_int8)),
                   Op("silu_and_mul_linear_int8", _silu_then(linear_int8)))
FP8 = QuantScheme("fp8", FP8_DTYPE, linear_fp8,
                  Op("fused_add_rmsnorm_linear_fp8", _norm_then(linear_fp8)),
                  Op("silu_and_mul_linear_fp8", _silu_then(linear_fp8)))
SCHEMES = {scheme.name: scheme for scheme in (INT8, FP8)}
