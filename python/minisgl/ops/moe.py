"""The Mixture-of-Experts block (chapter 18): route each token to its k experts, then the weighted
sum of their SiLU-gated MLPs.

The torch reference loops over the experts (moe/torch_ref.py); on a GPU the fused Triton kernel
(kernel/triton/fused_moe.py) does the same work in a fixed number of launches and without a host
sync, so CUDA graphs can record it. MINISGL_DISABLE_FUSED_KERNELS leaves it on: the torch loop asks
the GPU which experts have tokens, which a CUDA graph cannot record.

`fused_moe` calls the op, or with `backend` one implementation as asked (tests, benchmarks):
"triton" on a CPU runs the kernels under Triton's interpreter.
"""

from __future__ import annotations

from functools import cache
from types import ModuleType

import torch

from minisgl.moe.routing import route
from minisgl.moe.torch_ref import experts_torch

from .registry import Impl, Op


def moe_torch(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              top_k: int, normalize: bool) -> torch.Tensor:
    """x [T, H], router_logits [T, E], w13 [E, 2I, H] (gate then up rows), w2 [E, H, I]."""
    weights, ids = route(router_logits, top_k, normalize)
    return experts_torch(x, w13, w2, weights, ids)


@cache
def _fused_moe() -> ModuleType:
    from minisgl.kernel.triton import fused_moe  # imported on first use: Triton takes ~0.5 s

    return fused_moe


def moe_triton(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor,
               w2: torch.Tensor, top_k: int, normalize: bool) -> torch.Tensor:
    kernels = _fused_moe()
    weights, ids = kernels.route_triton(router_logits, top_k, normalize)
    return kernels.experts_triton(x, w13, w2, weights, ids)


moe = Op("moe", moe_torch)
moe.add(Impl("triton", moe_triton))


BACKENDS = ("auto", "torch", "triton")


def resolve_backend(backend: str, x: torch.Tensor) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"unknown MoE backend {backend!r}; choose one of {BACKENDS}")
    if backend == "auto":
        return moe.kind_for(x)
    return backend


def fused_moe(x: torch.Tensor, router_logits: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
              top_k: int, normalize: bool, backend: str = "auto") -> torch.Tensor:
    """The MoE block's output for x [T, H]: route with router_logits [T, E], then the weighted
    sum of each token's k experts (w13 [E, 2I, H] gate then up rows, w2 [E, H, I])."""
    if backend == "auto":  # the registry's rule picks (and a trace sees the call, chapter 21)
        return moe(x, router_logits, w13, w2, top_k, normalize)
    fn = moe.implementation(resolve_backend(backend, x))
    return fn(x, router_logits, w13, w2, top_k, normalize)
