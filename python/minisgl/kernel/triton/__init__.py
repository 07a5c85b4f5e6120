"""Triton kernels: the fused Mixture-of-Experts (chapter 18, in fused_moe.py, imported where it
is used); paged decode and extend attention, and the fused small kernels of a decoder layer
(RMSNorm with the residual add, q/k norm + RoPE, SiLU-and-mul, the one-token GEMV) and the
sampler's draw (chapter 20).

Without a CUDA device the kernels run under Triton's interpreter, which executes each program in
Python on CPU tensors: slow, but it checks the kernels' logic in CI on a CPU-only machine.
"""

from __future__ import annotations

import os
import sys

import torch

# Triton picks compiling or interpreting when it decorates a function, by reading TRITON_INTERPRET:
# for our kernels when the modules below are imported, and for its own library functions (tl.sum,
# tl.max, ...) when triton itself is first imported. So the variable must be set before triton is
# imported anywhere in the process; a value the user set explicitly is kept.
if not torch.cuda.is_available():
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise ImportError(
            "triton was imported before TRITON_INTERPRET=1 was set (importing torch._dynamo does "
            "that, and so do transformers' model modules), so its library functions cannot run "
            "under the interpreter: set TRITON_INTERPRET=1 in the environment, or import "
            "minisgl.kernel.triton first")
    os.environ.setdefault("TRITON_INTERPRET", "1")

# >>> ch20
from .activation import silu_and_mul  # noqa: E402
from .decode_attention import (  # noqa: E402
    DECODE_CONFIGS,
    DecodeConfig,
    DecodeWorkspace,
    choose_num_splits,
    decode_attention,
    max_num_splits,
)
from .extend_attention import extend_attention  # noqa: E402
from .gemv import gemv, gemv_rmsnorm, gemv_silu_and_mul  # noqa: E402
from .qk_norm_rope import qk_norm_rope  # noqa: E402
from .rmsnorm import fused_add_rms_norm, rms_norm  # noqa: E402
from .sampling import sample  # noqa: E402

__all__ = ["DECODE_CONFIGS", "DecodeConfig", "DecodeWorkspace", "choose_num_splits",
           "decode_attention", "extend_attention", "fused_add_rms_norm", "gemv", "gemv_rmsnorm",
           "gemv_silu_and_mul", "max_num_splits", "qk_norm_rope", "rms_norm", "sample",
           "silu_and_mul"]
# <<< ch20
# >>> ch26
from .quant_linear import (  # noqa: E402
    gemm_int8,
    gemv_int8,
    gemv_int8_rmsnorm,
    gemv_int8_silu_and_mul,
    quantize_fp8_rows,
)

__all__ += ["gemm_int8", "gemv_int8", "gemv_int8_rmsnorm", "gemv_int8_silu_and_mul",
            "quantize_fp8_rows"]
# <<< ch26
