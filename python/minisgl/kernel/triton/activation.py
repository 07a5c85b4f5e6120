"""silu(gate) * up in one launch, straight from the merged gate_up projection output.

The torch version splits the tensor (a view), then runs silu and a multiply: two kernels and an
intermediate the size of the output. Here one program reads a block of gate and the matching
block of up from the same row and writes the product. As in torch, silu(gate) is rounded to the
input dtype before the multiply, and the product is rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import pdl_args, wait_for_previous_kernel

BLOCK = 1024  # output elements per program


@triton.jit
def _silu_and_mul_kernel(x_ptr, out_ptr, stride_x, stride_o, inter, BLOCK: tl.constexpr,
                         PDL: tl.constexpr = False):
    wait_for_previous_kernel(PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < inter
    gate = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + inter + cols, mask=mask, other=0.0).to(tl.float32)
    silu = (gate / (1.0 + tl.exp(-gate))).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (silu * up).to(out_ptr.dtype.element_ty),
             mask=mask)


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x: [..., 2 * inter] (gate then up) -> silu(gate) * up, [..., inter] (a new tensor)."""
    if x.shape[-1] % 2 != 0:
        raise ValueError(f"the last axis ({x.shape[-1]}) must hold gate and up: an even size")
    inter = x.shape[-1] // 2
    # [rows, 2 * inter] with a contiguous last axis: a view for the engine's 2-D outputs
    x2 = x if x.dim() == 2 and x.stride(1) == 1 else x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty(*x.shape[:-1], inter, dtype=x.dtype, device=x.device)
    out2 = out.view(-1, inter)
    if x2.shape[0] > 0 and inter > 0:
        block = min(BLOCK, triton.next_power_of_2(inter))
        _silu_and_mul_kernel[(x2.shape[0], triton.cdiv(inter, block))](
            x2, out2, x2.stride(0), out2.stride(0), inter, BLOCK=block,
            **pdl_args(x.device, x2.shape[0]))
    return out
