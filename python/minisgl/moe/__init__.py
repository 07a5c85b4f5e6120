"""Mixture of Experts (chapter 18): the maths, in torch, that everything else checks against.

routing.py picks each token's k experts and their weights, torch_ref.py runs them (a loop over the
experts that got tokens: the reference, and what runs on a CPU), align.py sorts the (token, expert)
pairs into blocks the way the fused kernel does. Nothing here imports the engine: the fused Triton
kernel (kernel/triton/fused_moe.py), the registry's op `ops.moe` (ops/moe.py) and the model's
block (layers/moe.py) all sit above this package and use it.
"""

from __future__ import annotations

from .routing import route
from .torch_ref import experts_torch

__all__ = ["experts_torch", "route"]
