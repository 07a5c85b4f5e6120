"""The gated activation of Llama-style MLPs: silu(gate) * up, on one merged gate_up tensor."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minisgl.kernel import triton_for

from minisgl.trace.runtime import traced



@traced("silu_and_mul")
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    # >>> ch20
    if (fused := triton_for(x)) is not None:  # on a GPU: one Triton kernel (chapter 20)
        return fused.silu_and_mul(x)
    # <<< ch20
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up
