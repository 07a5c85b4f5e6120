"""Triton kernels (chapter 20): paged decode and extend attention.

Without a CUDA device the kernels run under Triton's interpreter, which executes each program in
Python on CPU tensors: slow, but it checks the kernels' logic in CI on a CPU-only machine.
"""

from __future__ import annotations

import os

import torch

# triton.jit decides between compiling and interpreting when it decorates a kernel, that is when
# the kernel modules below are imported, by reading TRITON_INTERPRET. So it must be set before
# they (and triton) are imported; a value the user set explicitly is kept.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from .decode_attention import DecodeWorkspace, choose_num_splits, decode_attention  # noqa: E402
from .extend_attention import extend_attention  # noqa: E402

__all__ = ["DecodeWorkspace", "choose_num_splits", "decode_attention", "extend_attention"]
