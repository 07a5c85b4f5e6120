"""The CPU's faster ops (chapter 20, for the CPU): oneDNN's linear over packed weights, and the
C++ linear, add+RMSNorm, SiLU-and-mul and RoPE of kernel/cpu_ops.py.

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

Later measurements on an AVX2 machine (benchmarks/results/cpu_ops.txt) found a plain C++ loop,
kernel/cpu_ops.py, faster still at batch 1 (it reads fp32 weights at the speed torch.sum reads
memory) and as fast at 8 to 32 rows, where both are bound by the multiply-adds. So fp32 weights
stay plain where that library builds (`keep_plain`), and oneDNN packs bf16 on CPUs that multiply
bf16 natively. The C++ versions of the small ops take every fp32 or bf16 CPU call: each is one
call instead of a dozen.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch

from minisgl.env import load_env
from minisgl.kernel import cpu_ops

from .activation import silu_and_mul
from .linear import linear
from .norm import fused_add_rms_norm
from .registry import Impl
from .rope import rope

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


def keep_plain(weight: torch.Tensor) -> bool:
    """The C++ linear reads this weight plain, faster than oneDNN reads it packed: fp32 weights
    where kernel/cpu_ops.py builds (a bf16 one goes to oneDNN wherever oneDNN packs bf16)."""
    return weight.dtype == torch.float32 and cpu_ops.available()


def packed_form(weight: torch.Tensor, lm_head: bool = False) -> torch.Tensor | None:
    """The weight in the layout this CPU's linear reads fastest, or None to keep it plain: the C++
    library's panels where it has them for the dtype (AVX-512: kernel/cpu_ops.py pack_panels),
    else oneDNN's layout, except for an fp32 layer weight that the C++ linear reads plain
    (`keep_plain`); an LM head's copy (lm_head=True) is packed for oneDNN all the same."""
    if cpu_ops.can_pack_panels(weight):
        return cpu_ops.pack_panels(weight)
    if can_pack(weight) and (lm_head or not keep_plain(weight)):
        return pack_weight(weight)
    return None


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


def plain_rows(x: torch.Tensor, weight: torch.Tensor | None = None, *_: Any) -> bool:
    """A linear call the C++ kernel runs: a CPU matrix and a plain weight of its dtype."""
    return (cpu_ops.takes(x) and x.dim() == 2 and isinstance(weight, torch.Tensor)
            and not weight.is_mkldnn and weight.dtype == x.dtype)


def cpu_matrix(x: torch.Tensor, *_: Any) -> bool:
    return cpu_ops.takes(x) and x.dim() == 2


# `available` is always true: a packed weight exists only where oneDNN was available to pack it.
linear.add(Impl("onednn", linear_onednn, takes=packed))
linear.add(Impl("cpp", cpu_ops.linear, takes=plain_rows, available=cpu_ops.available))
for _op, _fn in [(fused_add_rms_norm, cpu_ops.fused_add_rms_norm),
                 (silu_and_mul, cpu_ops.silu_and_mul), (rope, cpu_ops.rope)]:
    _op.add(Impl("cpp", _fn, takes=cpu_matrix, available=cpu_ops.available))
