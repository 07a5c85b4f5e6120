"""Per-output-channel symmetric quantization of a weight matrix (chapter 26).

Row n of the weight W [N, K] is stored as 8-bit values q[n] and one scale s[n] with
W[n] ~= q[n] * s[n]:

- symmetric: zero stays exactly zero and no zero point is stored (an asymmetric format maps
  [min, max] instead of [-max|w|, max|w|]: one more number per row and a correction term in every
  product, for weights whose values are spread around zero anyway);
- per output channel: each row gets the range of its own values, so one row with large weights
  does not coarsen every other row (one scale per tensor would); and since all of row n shares
  s[n], a kernel multiplies the row's sum by s[n] once instead of every weight.

int8: s = max|w| / 127, q = round(w / s) in [-127, 127]: the error of each weight is at most s / 2.
fp8 (e4m3): s = max|w| / 448, q = w / s rounded to the nearest e4m3 number (3 mantissa bits):
the error is relative, at most 1/16 of |w| (or 2^-10 * s for the smallest, subnormal values).
A row of zeros gets s = 1, never 0: dividing by it must not make NaNs.
"""

from __future__ import annotations

import torch

from minisgl.ops.quant_linear import FP8_DTYPE, FP8_MAX

INT8_MAX = 127


def _row_scales(weight: torch.Tensor, top: float) -> torch.Tensor:
    """max|w| / top per row, fp32; 1 for a row of zeros."""
    amax = weight.float().abs().amax(dim=1)
    return torch.where(amax > 0, amax / top, torch.ones_like(amax))


def quantize_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [N, K], scale fp32 [N]) with weight ~= q * scale[:, None]."""
    scale = _row_scales(weight, INT8_MAX)
    q = torch.round(weight.float() / scale[:, None]).clamp_(-INT8_MAX, INT8_MAX)
    return q.to(torch.int8), scale


def quantize_fp8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q e4m3 [N, K], scale fp32 [N]) with weight ~= q * scale[:, None]."""
    scale = _row_scales(weight, FP8_MAX)
    q = (weight.float() / scale[:, None]).clamp_(-FP8_MAX, FP8_MAX)
    return q.to(FP8_DTYPE), scale


def dequantize(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The fp32 weight the 8-bit one stands for."""
    return q.float() * scale[:, None]


QUANTIZERS = {"int8": quantize_int8, "fp8": quantize_fp8}
