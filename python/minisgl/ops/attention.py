"""Attention over the paged KV cache (chapter 6): the one op whose implementation is chosen once
per engine, not per call.

Its implementations are the attention backends (attention/__init__.py: torch, and Triton from
chapter 20), and the rule that picks one is `--attn` (auto: Triton on a GPU, torch on a CPU),
applied when the engine is built: a backend keeps metadata for a whole batch, so calls of one
step cannot switch between them. The op is here so that every call still goes through the
registry, like every other op (a trace records each one, chapter 21).
"""

from __future__ import annotations

from typing import Any

import torch

from .registry import Op


def run_backend(backend: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Any) -> torch.Tensor:
    """Store this step's k and v in the pool, then attend over each request's whole sequence:
    q [tokens, qo_heads, head_dim] -> [tokens, qo_heads, head_dim]."""
    return backend.forward(q, k, v, layer_id, batch)


attention = Op("attention", run_backend)
