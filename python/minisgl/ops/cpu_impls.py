"""The CPU's faster linear layer: weights packed once for oneDNN (chapter 20, for the CPU).

A decode step on a CPU reads every weight once per token, and the time goes to the matrix
multiplies. torch's `F.linear` hands a few rows times a big matrix to a BLAS routine that, on the
2-core machine of this course, reads the weights at about 12 GB/s, while the machine can read
memory at about 30 GB/s (measured: benchmarks/results/cpu_linear_packing.txt). oneDNN, the CPU
library torch ships, does better when the weight is first reordered into its own blocked layout:
the same 30 layers of SmolLM2 take about 26 ms instead of 44 in fp32, and 17 ms in bf16.

So the engine packs each linear weight once after loading (layers/cpu_pack.py: pack_linears) and
the `linear` op runs packed weights here. A packed weight is an opaque oneDNN tensor (its layout
is not rows and columns): only this implementation can use it, so it takes every call whose
weight is packed, and nothing else. The packing is switched off by MINISGL_DISABLE_ONEDNN=1, and
whenever a trace watches the ops (chapter 21): a trace replays calls with the torch reference.
A bf16 weight stays plain on a CPU whose oneDNN cannot multiply bf16 (`packs` asks it once).
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from minisgl.env import load_env

from .linear import linear
from .registry import Impl

PACKABLE = (torch.float32, torch.bfloat16)
# oneDNN picks its blocked layout for an expected number of rows; 32 serves one row as well as
# 32 (measured: 17.4 ms and 40 ms for the 30 layers, against 19.7 and 55 when packed for one row).
ROWS_HINT = 32


@cache
def onednn_available() -> bool:
    """This torch has oneDNN's linear ops, and MINISGL_DISABLE_ONEDNN is not set."""
    return (torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
            and not load_env().disable_onednn)


@cache
def packs(dtype: torch.dtype) -> bool:
    """oneDNN packs and multiplies weights of this dtype on this CPU. fp32 works everywhere; bf16
    needs AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT on x86, and without them torch raises instead of
    falling back. One tiny weight, packed and used once, tells (the answer is kept)."""
    if dtype not in PACKABLE or not hasattr(torch.ops.mkldnn, "_reorder_linear_weight"):
        return False
    try:
        linear_onednn(torch.ones(1, 2, dtype=dtype), pack_weight(torch.ones(2, 2, dtype=dtype)))
    except RuntimeError:
        return False
    return True


def can_pack(weight: torch.Tensor) -> bool:
    return (weight.device.type == "cpu" and weight.dim() == 2 and not weight.is_mkldnn
            and onednn_available() and packs(weight.dtype))


def pack_weight(weight: torch.Tensor) -> torch.Tensor:
    """The weight [out, in] reordered for oneDNN: shape and dtype stay, the layout is oneDNN's."""
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), ROWS_HINT)


def packed(_x: torch.Tensor, weight: torch.Tensor | None = None, *_: Any) -> bool:
    return isinstance(weight, torch.Tensor) and weight.is_mkldnn


def linear_onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
                  ) -> torch.Tensor:
    if x.dtype != weight.dtype:
        raise TypeError(f"linear: input {x.dtype} and packed weight {weight.dtype} differ")
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


# `available` is always true: a packed weight exists only where oneDNN was available to pack it.
linear.add(Impl("onednn", linear_onednn, takes=packed))
