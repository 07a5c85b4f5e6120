"""The gated activation of Llama-style MLPs: silu(gate) * up, on one merged gate_up tensor."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .registry import Op


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.chunk(2, dim=-1)
    return F.silu(gate) * up


silu_and_mul = Op("silu_and_mul", silu_and_mul_torch)
