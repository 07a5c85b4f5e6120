"""Attention backends: how a batch of new queries attends over the paged KV cache."""

from __future__ import annotations

from .base import BaseAttnBackend
from .torch_native import TorchNativeBackend

BACKENDS = {"torch": TorchNativeBackend}


def create_attn_backend(name: str, num_qo_heads: int, num_kv_heads: int) -> BaseAttnBackend:
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r} (available: {', '.join(BACKENDS)})")
    return BACKENDS[name](num_qo_heads, num_kv_heads)


__all__ = ["BACKENDS", "BaseAttnBackend", "TorchNativeBackend", "create_attn_backend"]
