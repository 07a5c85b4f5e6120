"""RMSNorm in one launch, optionally with the residual add of a pre-norm decoder layer before it.

The torch version (layers/norm.py) is eight or nine small kernels (add, cast, square, mean, add
eps, rsqrt, multiply, cast, multiply by the weight), each a pass over the row. Here one program
owns one row: it loads it once, does all of that in registers, and writes the result once.

The rounding follows the torch version (and Hugging Face): the sum x + residual is rounded to the
input dtype (it is the residual stream the next layer adds to), the normalised row is rounded to
the input dtype before it is multiplied by the weight, and that product is rounded once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .pdl import pdl_args, wait_for_previous_kernel


@triton.jit
def _rms_norm_kernel(
    x_ptr, residual_ptr, weight_ptr, out_ptr, sum_ptr,
    stride_x, stride_r, stride_o, stride_s,
    hidden, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr = False,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    wait_for_previous_kernel(PDL)
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(residual_ptr + row * stride_r + cols, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(sum_ptr.dtype.element_ty)
        tl.store(sum_ptr + row * stride_s + cols, x, mask=mask)
    h = x.to(tl.float32)
    mean_square = tl.sum(h * h, axis=0) / hidden
    normed = (h * tl.rsqrt(mean_square + eps)).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(weight_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (w * normed).to(out_ptr.dtype.element_ty),
             mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """t as [rows, hidden] with a contiguous last axis: a view for the engine's tensors (2-D,
    rows possibly strided); other layouts are copied."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t
    return t.reshape(-1, t.shape[-1]).contiguous()


def _launch(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor, eps: float
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    hidden = x.shape[-1]
    if weight.shape != (hidden,):
        raise ValueError(f"weight has shape {tuple(weight.shape)}, expected ({hidden},)")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"residual {tuple(residual.shape)} {residual.dtype} does not match "
                         f"x {tuple(x.shape)} {x.dtype}")
    x2 = _rows(x)
    out = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype), device=x.device)
    out2 = out.view(-1, hidden)
    if residual is None:
        r2 = s2 = x2  # unused: HAS_RESIDUAL is off
        total = None
    else:
        r2 = _rows(residual)
        total = torch.empty_like(x, memory_format=torch.contiguous_format)
        s2 = total.view(-1, hidden)
    if x2.shape[0] > 0:
        _rms_norm_kernel[(x2.shape[0],)](
            x2, r2, weight, out2, s2,
            x2.stride(0), r2.stride(0), out2.stride(0), s2.stride(0),
            hidden, eps,
            HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(hidden),
            num_warps=4 if hidden >= 1024 else 1, **pdl_args(x.device, x2.shape[0]),
        )
    return out, total


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis of x (a new tensor)."""
    return _launch(x, None, weight, eps)[0]


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) in one pass; residual None means x is the residual.

    Both results are new tensors and the inputs are never written. Writing the sum into
    `residual` in place would save an allocation, but an in-place kernel must know that nobody
    else holds its input: with residual None (the first layer) the "residual" is the embedding
    output, and inside a CUDA graph the inputs may be the runner's static buffers. New tensors
    cost nothing extra in the captured graph (its memory pool hands out the same addresses on
    every replay), so the safe choice is also free."""
    out, total = _launch(x, residual, weight, eps)
    return out, (x if total is None else total)
