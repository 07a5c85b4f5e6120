"""Mixture of Experts (chapter 18): routing, the experts' computation, and the layer.

Two implementations compute the same thing: a torch loop over the experts (the reference, and
what runs on a CPU) and a fused Triton kernel (kernel/triton/fused_moe.py: a fixed number of
launches, no host sync, so CUDA graphs can record it). Both are implementations of the registry's
op `ops.moe` (ops/moe.py), whose rule takes Triton for CUDA tensors and torch otherwise
(`backend="auto"`); a backend named here runs as asked: "triton" on a CPU runs the kernels under
Triton's interpreter.
"""

from __future__ import annotations

import torch

from minisgl import ops

from .routing import route
from .torch_ref import experts_torch

BACKENDS = ("auto", "torch", "triton")


def resolve_backend(backend: str, x: torch.Tensor) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown MoE backend {backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        return ops.moe.kind_for(x)
    return backend


def fused_moe(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              top_k: int, normalize: bool, backend: str = "auto") -> torch.Tensor:
    """The MoE block's output for x [T, H]: route with router_logits [T, E], then the weighted
    sum of each token's k experts (w13 [E, 2I, H] gate then up rows, w2 [E, H, I])."""
    if backend == "auto":  # the registry's rule picks (and a trace sees the call, chapter 21)
        return ops.moe(x, router_logits, w13, w2, top_k, normalize)
    fn = ops.moe.implementation(resolve_backend(backend, x))  # as asked: tests, benchmarks
    return fn(x, router_logits, w13, w2, top_k, normalize)


__all__ = ["BACKENDS", "experts_torch", "fused_moe", "resolve_backend", "route"]
