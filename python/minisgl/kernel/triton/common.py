"""What the attention kernels share: tile limits of tl.dot and its precision per input type."""

from __future__ import annotations

import torch

MIN_DOT_ROWS = 16  # tl.dot needs tiles of at least 16 x 16 on a GPU


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 inputs: exact products ("ieee") instead of the GPU's default TF32 (a 10-bit mantissa),
    so an fp32 model matches the torch backend; bf16/fp16 products are exact either way."""
    return "ieee" if dtype == torch.float32 else "tf32"
