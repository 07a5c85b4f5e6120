"""Decode attention on a CPU in C++, over the paged KV pool (chapter 20, for the CPU).

The torch backend's decode gathers every request's K/V rows into a new tensor and then runs SDPA,
whose CPU kernel is made for long query blocks: at batch 32 on the 2-core machine the copy and the
attention each cost about a millisecond per layer, more than the step's matrix multiplies.
csrc/cpu_attention.cpp reads the rows where they lie, through the page table, once each
(benchmarks/cpu_attention.py measures both). It is built like chapter 10's radix compare: with the
machine's g++ on first use, into `$MINISGL_CACHE_DIR/cpu_attention/`, and called through ctypes.

The build tries `-march=native -fopenmp` first (AVX-512 where the CPU has it, threads), then
without -march=native, then without OpenMP (one thread). When nothing builds (no compiler, as on
a bare Windows or macOS machine), `available()` is False and the engine keeps the torch backend:
one warning, same answers. MINISGL_DISABLE_FUSED_KERNELS=1 switches the kernel off too.
"""

from __future__ import annotations

import ctypes
import functools
import subprocess
from pathlib import Path

import torch

from minisgl.env import load_env
from minisgl.utils.cpu import cpu_flags
from minisgl.utils.logger import init_logger

from .radix import build_cpp_library

SOURCE = Path(__file__).parent / "csrc" / "cpu_attention.cpp"
# the first set that compiles is used
FLAG_SETS = (
    ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"),
    ("-O3", "-fopenmp", "-shared", "-fPIC"),
    ("-O3", "-shared", "-fPIC"),
)
SYMBOLS = {torch.float32: "minisgl_cpu_decode_attention_f32",
           torch.bfloat16: "minisgl_cpu_decode_attention_bf16"}
DTYPES = tuple(SYMBOLS)

logger = init_logger(__name__)


def available() -> bool:
    """The kernel is built and loaded, and not switched off."""
    return not load_env().disable_fused_kernels and _default_library() is not None


@functools.cache
def _default_library() -> ctypes.CDLL | None:
    # Cached, failures included: a missing compiler costs one attempt and one warning.
    return load_library(load_env().cache_dir / "cpu_attention")


def load_library(build_dir: Path) -> ctypes.CDLL | None:
    """Build (if needed) and load the kernel from build_dir; None, with a warning, on failure."""
    try:
        lib = build_native(SOURCE, build_dir)
    except NativeBuildError as err:
        logger.warning(f"C++ CPU decode attention unavailable, the torch backend decodes: {err}")
        return None
    for symbol in SYMBOLS.values():
        fn = getattr(lib, symbol)
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 \
            + [ctypes.c_void_p, ctypes.c_int64] + [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 4 \
            + [ctypes.c_float, ctypes.c_int]
        fn.restype = ctypes.c_int64
    return lib


class NativeBuildError(RuntimeError):
    """No flag set of FLAG_SETS compiled the source (the message is the last compiler error)."""


def build_native(source: Path, build_dir: Path) -> ctypes.CDLL:
    """Compile a C++ file of this folder's CPU kernels with the first of FLAG_SETS that works
    (csrc/cpu_ops.cpp is built the same way) and load it."""
    # a -march=native build is only for this kind of CPU: its flags are part of the file's hash
    salt = " ".join(sorted(cpu_flags()))
    errors = []
    for flags in FLAG_SETS:
        try:
            return ctypes.CDLL(str(build_cpp_library(source, flags, build_dir, salt)))
        except (OSError, subprocess.CalledProcessError) as err:
            errors.append(str(getattr(err, "stderr", None) or err).strip())
    raise NativeBuildError(errors[-1][:500])


@functools.cache
def has_dpbf16() -> bool:
    """The bf16 kernel computes its scores with AVX-512 BF16's vdpbf16ps."""
    lib = _default_library() if available() else None
    return lib is not None and bool(lib.minisgl_cpu_attention_has_dpbf16())


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     page_table: torch.Tensor, table_rows: torch.Tensor, kv_lens: torch.Tensor,
                     scale: float, check: bool = True) -> torch.Tensor:
    """One new token per request over its whole sequence.

    q: [B, qo_heads, D]; k_cache, v_cache: [slots, kv_heads, D] (one layer of the pool);
    page_table: int32 [rows, max_len], page_table[row, pos] = slot of that token;
    table_rows, kv_lens: int64 [B], each request's row and sequence length. -> [B, qo_heads, D]
    check=False skips the argument checks: for a caller that ran check_inputs once for a whole
    step (30 layers, same tables). Slots are always checked, in C++, as they are read.
    """
    lib = _default_library()
    if lib is None:
        raise RuntimeError("the C++ CPU attention kernel could not be built (see the warning)")
    if check:
        check_inputs(q, k_cache, v_cache, page_table, table_rows, kv_lens)
    q = q.contiguous()
    out = torch.empty_like(q)
    batch, qo_heads, head_dim = q.shape
    bad = getattr(lib, SYMBOLS[q.dtype])(
        q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), k_cache.stride(0),
        k_cache.shape[0], page_table.data_ptr(), page_table.stride(0), table_rows.data_ptr(),
        kv_lens.data_ptr(), out.data_ptr(), batch, qo_heads, k_cache.shape[1], head_dim, scale,
        torch.get_num_threads())
    if bad:
        raise ValueError(f"{bad} (request, KV head) pairs have a page-table slot outside the "
                         f"pool's {k_cache.shape[0]} slots")
    return out


def check_inputs(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
           page_table: torch.Tensor, table_rows: torch.Tensor, kv_lens: torch.Tensor) -> None:
    """C++ trusts every pointer and length it gets: whatever could make it read out of bounds
    is checked here first (once per call: a few tensor attributes and two small reductions)."""
    tensors = (q, k_cache, v_cache, page_table, table_rows, kv_lens)
    if any(t.device.type != "cpu" for t in tensors):
        raise ValueError("CPU decode attention needs every tensor on the CPU")
    if q.dtype not in DTYPES or k_cache.dtype != q.dtype or v_cache.dtype != q.dtype:
        raise ValueError(f"q, k_cache and v_cache must share one dtype of {DTYPES}")
    if q.dim() != 3 or k_cache.dim() != 3 or k_cache.shape != v_cache.shape:
        raise ValueError("q must be [B, heads, D] and k/v_cache [slots, kv_heads, D], alike")
    batch, qo_heads, head_dim = q.shape
    slots, kv_heads, cache_dim = k_cache.shape
    if cache_dim != head_dim or kv_heads == 0 or qo_heads % kv_heads:
        raise ValueError(f"head sizes differ or {qo_heads} query heads do not share "
                         f"{kv_heads} KV heads evenly")
    # each slot's rows contiguous, with k and v laid out alike (one stride is passed for both)
    for cache in (k_cache, v_cache):
        if cache.stride()[1:] != (head_dim, 1) or cache.stride(0) != k_cache.stride(0):
            raise ValueError("k/v_cache rows must be contiguous [kv_heads, D] blocks")
    if page_table.dtype != torch.int32 or page_table.dim() != 2 or page_table.stride(1) != 1:
        raise ValueError("page_table must be a row-contiguous int32 [rows, max_len] tensor")
    for name, t in (("table_rows", table_rows), ("kv_lens", kv_lens)):
        if t.dtype != torch.int64 or t.shape != (batch,) or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous int64 tensor of {batch} values")
    if batch == 0:
        return
    if int(table_rows.min()) < 0 or int(table_rows.max()) >= page_table.shape[0]:
        raise ValueError("a table row is outside the page table")
    if int(kv_lens.min()) < 1 or int(kv_lens.max()) > page_table.shape[1]:
        raise ValueError("a sequence length is below 1 or longer than the page table's rows")
