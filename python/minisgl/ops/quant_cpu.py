"""The CPU's int8 linear layer (chapter 26): fbgemm's int8 matrix multiply, made exact enough to
stand for weight-only int8.

What was measured on the course's 2-core AVX2 machine (benchmarks/results/cpu_quantization.txt
has the figures): torch's weight-only kernel, torch._weight_int8pack_mm, is several times slower
than the fp32 linear at one token here (it is fast with AVX-512 only); a dequantized copy per
call costs more than the fp32 weight it replaces. The fast int8 product a CPU build of torch
ships is fbgemm's (`quantized::linear_dynamic`, AVX2 kernels): it reads the int8 weight packed
in its own layout, but it rounds the activations to 8 bits too (asymmetric, one scale for the
whole [M, K] input, 7 bits with reduce_range, which AVX2 needs so that its 16-bit pair sums
cannot saturate). On SmolLM2 that rounding alone changed most greedy continuations.

So each row of x is handed to fbgemm as two rows of small integers, which it represents
exactly:

    t = x / step, step = max|x_row| / 63     (|t| <= 63)
    coarse = round(t)                          (integers in [-63, 63])
    fine = 126 * (t - coarse)                  (in [-63, 63]; fbgemm rounds it)

and fbgemm is told the activations' scale and zero point instead of finding them itself
(`quantized::linear_with_input_q_dq_qweight_dq_output_fp32`): scale 1 and zero point 64, so
every integer in [-63, 63] becomes the byte t + 64 in [1, 127] unrounded (7 bits, as AVX2
needs). Then

    y = step * (W coarse + W fine / 126)

with x rounded to 1/126 of a step, max|x_row| / 7938: about 13 bits per token, finer than bf16.
The weight is read once for all 2M rows. fbgemm keeps the int8 weight padded to its blocks
(K up to a multiple of 512 here): SmolLM2's K = 576 rows take 1024 bytes.

The packed weight is an opaque torch.ScriptObject: only this implementation takes it, and the
engine packs the int8 weights of a CPU model once after loading (quant/model.py), as chapter 20
packs fp32 weights for oneDNN. torch marks its quantized tensors deprecated; they still work in
2.13.
"""

from __future__ import annotations

import warnings
from functools import cache
from typing import Any

import torch

from .quant_linear import INT8
from .registry import Impl

COARSE = 63  # |coarse| <= 63
FINE = 126  # the fine row counts 1/126 of a step
INF = float("inf")
ZERO_POINT = 64  # [-63, 63] + 64 = [1, 127]: 7-bit bytes, whose pair sums fit AVX2's 16 bits


@cache
def fbgemm_available() -> bool:
    return "fbgemm" in torch.backends.quantized.supported_engines and hasattr(
        torch.ops.quantized, "linear_with_input_q_dq_qweight_dq_output_fp32")


def can_pack_int8(weight: Any) -> bool:
    return (isinstance(weight, torch.Tensor) and weight.dtype == torch.int8
            and weight.device.type == "cpu" and fbgemm_available())


def pack_int8(weight: torch.Tensor, scale: torch.Tensor) -> torch.ScriptObject:
    """The int8 weight [N, K] and its row scales in fbgemm's packed layout."""
    with warnings.catch_warnings():  # "quantized tensor creation functions ... are deprecated"
        warnings.simplefilter("ignore", UserWarning)
        q = torch._make_per_channel_quantized_tensor(
            weight.contiguous(), scale.double(), torch.zeros_like(scale, dtype=torch.int64), 0)
        return torch.ops.quantized.linear_prepack(q, None)


def fbgemm_packed(_x: torch.Tensor, weight: Any = None, *_: Any) -> bool:
    return isinstance(weight, torch.ScriptObject)


def linear_int8_fbgemm(x: torch.Tensor, weight: torch.ScriptObject, scale: torch.Tensor,
                       bias: torch.Tensor | None) -> torch.Tensor:
    """linear_int8 with a packed weight (its scales are inside it; `scale` is the same).

    A dozen small ops around one fbgemm call, each a few microseconds on a slow CPU: the ones
    that would change nothing (a reshape, a cast to the same dtype) are skipped."""
    plain = x.dim() == 2 and x.dtype == torch.float32
    rows = x if plain else x.reshape(-1, x.shape[-1]).float()
    m = rows.shape[0]
    step = torch.linalg.vector_norm(rows, INF, 1, True)
    step = step.clamp_(min=1e-30).div_(COARSE)  # a row of zeros stays zeros, not 0 / 0
    t = rows / step
    coarse = t.round()
    fine = t.sub_(coarse).mul_(FINE)
    both = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
        torch.cat([coarse, fine]), 1.0, ZERO_POINT, weight)
    y = both[:m].add_(both[m:], alpha=1 / FINE).mul_(step)
    if bias is not None:
        y += bias
    return y if plain else y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])


# Available wherever a packed weight exists: one is made only where fbgemm_available() said so.
INT8.linear.add(Impl("fbgemm", linear_int8_fbgemm, takes=fbgemm_packed))
