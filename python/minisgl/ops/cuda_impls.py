"""The custom CUDA kernels of chapter 19 as faster implementations of store_kv and embedding.

They take GPU tensors and are available when the extension (kernel/cuda_ext.py) builds on this
machine: nvcc and ninja found, no compile error, MINISGL_DISABLE_CUDA_EXT unset. It is built, or
loaded from the cache folder, on the first GPU call.
"""

from __future__ import annotations

from types import ModuleType

import torch

from minisgl.kernel.cuda_ext import load_extension

from .kv import embedding, store_kv
from .registry import Impl


def extension_built() -> bool:
    return load_extension() is not None  # cached: the first call builds or loads it


def _extension() -> ModuleType:
    ext = load_extension()
    if ext is None:  # only a caller that skips the rule gets here (a benchmark, a trace)
        raise RuntimeError("the chapter-19 CUDA extension is not available here")
    return ext


def store_kv_cuda(k_cache: torch.Tensor, v_cache: torch.Tensor, indices: torch.Tensor,
                  k: torch.Tensor, v: torch.Tensor) -> None:
    # The kernel copies rows of bytes: each token's heads as one row, on the caller's stream.
    n = k.shape[0]
    _extension().store_kv(k_cache.view(k_cache.shape[0], -1), v_cache.view(v_cache.shape[0], -1),
                          indices.int(), k.reshape(n, -1), v.reshape(n, -1),
                          torch.cuda.current_stream().cuda_stream)


def embedding_cuda(weight: torch.Tensor, ids: torch.Tensor, start: int = 0,
                   length: int | None = None) -> torch.Tensor:
    rows = weight.shape[0] if length is None else length
    return _extension().indexing(weight, ids.int().flatten(), start, rows,
                                 torch.cuda.current_stream().cuda_stream).view(*ids.shape, -1)


store_kv.add(Impl("cuda", store_kv_cuda, available=extension_built))
embedding.add(Impl("cuda", embedding_cuda, available=extension_built))
