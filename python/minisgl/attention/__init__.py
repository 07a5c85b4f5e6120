"""Attention backends: how a batch of new queries attends over the paged KV cache."""

from __future__ import annotations

import torch

from minisgl.kvcache.mha_pool import MHAKVCache

from .base import BaseAttnBackend
from .cpu import CpuBackend
from .flashinfer import FlashInferBackend
from .torch_native import TorchNativeBackend
from .triton import TritonBackend

BACKENDS = {"torch": TorchNativeBackend}
# >>> ch20
BACKENDS["triton"] = TritonBackend
BACKENDS["cpu"] = CpuBackend
# <<< ch20
# >>> ch23
BACKENDS["flashinfer"] = FlashInferBackend  # a peer's kernels; needs flashinfer-python, a GPU
# <<< ch23


def create_attn_backend(name: str, kv_cache: MHAKVCache, page_table: torch.Tensor,
                        num_qo_heads: int, num_kv_heads: int) -> BaseAttnBackend:
    """The backend called `name`, or for "auto" the best one for the pool's device (auto_backend).
    """
    if name == "auto":
        name = auto_backend(page_table)
    if name not in BACKENDS:
        raise ValueError(f"unknown attention backend {name!r} "
                         f"(available: auto, {', '.join(BACKENDS)})")
    return BACKENDS[name](kv_cache, page_table, num_qo_heads, num_kv_heads)


def auto_backend(page_table: torch.Tensor) -> str:
    """From chapter 20: Triton on a GPU; on a CPU (where Triton would only run under its
    interpreter) the C++ decode kernel when it could be built here. Otherwise, and in the trees
    before chapter 20, torch."""
    if page_table.is_cuda:
        return "triton" if "triton" in BACKENDS else "torch"
    return "cpu" if "cpu" in BACKENDS and BACKENDS["cpu"].available() else "torch"


__all__ = ["BACKENDS", "BaseAttnBackend", "TorchNativeBackend", "create_attn_backend"]
