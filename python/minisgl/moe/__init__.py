"""Mixture of Experts (chapter 18): routing, the experts' computation, and the layer.

Two implementations compute the same thing: a torch loop over the experts (the reference, and
what runs on a CPU) and a fused Triton kernel (kernel/triton/fused_moe.py: a fixed number of
launches, no host sync, so CUDA graphs can record it). `backend="auto"` takes Triton for CUDA
tensors and torch otherwise; "triton" on a CPU runs the kernels under Triton's interpreter.
"""

from __future__ import annotations

import torch

from .routing import route
from .torch_ref import experts_torch

from minisgl.trace.runtime import traced

BACKENDS = ("auto", "torch", "triton")


def resolve_backend(backend: str, x: torch.Tensor) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown MoE backend {backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        return "triton" if x.is_cuda else "torch"
    return backend


@traced("moe")
def fused_moe(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              top_k: int, normalize: bool, backend: str = "auto") -> torch.Tensor:
    """The MoE block's output for x [T, H]: route with router_logits [T, E], then the weighted
    sum of each token's k experts (w13 [E, 2I, H] gate then up rows, w2 [E, H, I])."""
    if resolve_backend(backend, x) == "triton":
        from minisgl.kernel.triton.fused_moe import experts_triton, route_triton

        weights, ids = route_triton(router_logits, top_k, normalize)
        return experts_triton(x, w13, w2, weights, ids)
    weights, ids = route(router_logits, top_k, normalize)
    return experts_torch(x, w13, w2, weights, ids)


__all__ = ["BACKENDS", "experts_torch", "fused_moe", "resolve_backend", "route"]
