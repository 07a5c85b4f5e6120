"""Attention backends: how a batch of new queries attends over the paged KV cache."""

from __future__ import annotations

import torch

from minisgl.kvcache.mha_pool import MHAKVCache

from .base import BaseAttnBackend
from .torch_native import TorchNativeBackend
from .triton import TritonBackend

BACKENDS = {"torch": TorchNativeBackend}
# >>> ch20
BACKENDS["triton"] = TritonBackend
# <<< ch20


def create_attn_backend(name: str, kv_cache: MHAKVCache, page_table: torch.Tensor,
                        num_qo_heads: int, num_kv_heads: int) -> BaseAttnBackend:
    """The backend called `name`, or for "auto" the best one for the pool's device: the Triton
    backend (chapter 20) on a GPU, torch on a CPU (where Triton would only run under its
    interpreter) and in the trees before chapter 20."""
    if name == "auto":
        name = "triton" if page_table.is_cuda and "triton" in BACKENDS else "torch"
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r} "
                         f"(available: auto, {', '.join(BACKENDS)})")
    return BACKENDS[name](kv_cache, page_table, num_qo_heads, num_kv_heads)


__all__ = ["BACKENDS", "BaseAttnBackend", "TorchNativeBackend", "create_attn_backend"]
