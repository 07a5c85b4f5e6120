"""Building and loading the CUDA extension (csrc/ext.cu) just in time, once per machine.

torch.utils.cpp_extension.load compiles it with nvcc and ninja into the cache folder on first use
(tens of seconds) and loads it from there afterwards. When anything is missing (no GPU, no nvcc,
a compile error), the engine keeps running on the torch implementations, with one warning.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path
from types import ModuleType

import torch

from minisgl.env import load_env
from minisgl.utils.logger import init_logger

logger = init_logger(__name__)
# resolved: a link to another checkout's sources (benchmarks/ab_gpu.sh) then shares its build
CSRC = (Path(__file__).parent / "csrc").resolve()
SOURCES = ("ext.cu", "kv_kernels.cuh")


def _build_dir() -> Path:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((CSRC / name).read_bytes())
    digest.update(torch.__version__.encode())
    # and where the sources are: ninja's build file names them by path, so two checkouts sharing
    # one cache folder (an A/B run of two commits) would otherwise rebuild on every switch
    digest.update(str(CSRC).encode())
    path = load_env().cache_dir / "cuda_ext" / digest.hexdigest()[:16]
    path.mkdir(parents=True, exist_ok=True)
    return path


@cache
def load_extension() -> ModuleType | None:
    """The compiled extension, or None (with one warning) when it cannot be had here."""
    if load_env().disable_cuda_ext:
        return None
    if not torch.cuda.is_available():
        return None
    try:
        from torch.utils.cpp_extension import load

        return load(name="minisgl_kernels", sources=[str(CSRC / "ext.cu")],
                    extra_include_paths=[str(CSRC)], build_directory=str(_build_dir()),
                    extra_cuda_cflags=["-O3", "-std=c++17"], verbose=False)
    except Exception as e:  # no nvcc, no ninja, a compile error: run on torch instead
        logger.warning("CUDA extension unavailable, using torch kernels: %s",
                       str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__)
        return None
