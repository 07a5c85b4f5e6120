"""A decoder layer's small ops on a CPU in C++, one call each (chapter 20, for the CPU).

On a CPU a batch-1 decode step is bound by two things: reading every weight once, and calling
thousands of small torch ops from Python (RMSNorm alone is seven of them, RoPE a dozen). The
functions here do linear, add+RMSNorm, SiLU-and-mul and RoPE each in one call into
csrc/cpu_ops.cpp (built with the machine's g++ on first use, like csrc/cpu_attention.cpp), so a
layer makes a handful of calls. The linear reads a plain [out, in] weight straight from memory:
at batch 1 it reaches the bandwidth torch.sum gets, where oneDNN's packed weights reach about
two thirds of it on the course's AVX2 machine (benchmarks/results/cpu_ops.txt).

Where g++ builds with AVX-512 (`panel_dtypes()`), weights are packed into panels of 16 outputs
(`pack_panels`, done once by layers/cpu_pack.py) and the linear of a packed weight keeps its 16
sums in a vector's lanes: vfmadd231ps for fp32, vdpbf16ps (AVX-512 BF16) for bf16. On the 2-core
AVX-512 VM it is faster than oneDNN's packed weights at decode sizes (1 to 32 rows) and within
a few percent of them at 512 rows, in both dtypes (benchmarks/results/cpu_linear_panels.txt).

ops/cpu_impls.py registers them for CPU tensors of fp32 or bf16. When nothing builds (no
compiler), or MINISGL_DISABLE_FUSED_KERNELS=1, `available()` is False and the torch code runs:
one warning, the same answers. Every function checks what C++ would otherwise trust (dtypes,
shapes, strides) in a few tensor attributes; positions are checked in C++ as they are read.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from minisgl.env import load_env
from minisgl.utils.logger import init_logger

from .cpu_attention import NativeBuildError, build_native

SOURCE = Path(__file__).parent / "csrc" / "cpu_ops.cpp"
SUFFIX = {torch.float32: "f32", torch.bfloat16: "bf16"}
DTYPES = tuple(SUFFIX)

_P, _I, _F, _T = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
SIGNATURES = {  # name -> (argument types, return type)
    "linear": ([_P, _I, _P, _P, _P, _I, _I, _I, _I, _T], None),
    "add_rmsnorm": ([_P, _I, _P, _I, _P, _F, _P, _P, _I, _I, _T], None),
    "silu_mul": ([_P, _I, _P, _I, _I, _T], None),
    "rope": ([_P, _I, _P, _P, _P, _I, _P, _P, _F, _P, _P, _I, _I, _I, _I, _T], _I),
}

logger = init_logger(__name__)


@functools.cache  # asked on every op call: the answer is kept (as ops/triton_impls.py keeps its)
def available() -> bool:
    """The library is built and loaded, and the fused kernels are not switched off."""
    return not load_env().disable_fused_kernels and _default_library() is not None


@functools.cache
def _default_library() -> ctypes.CDLL | None:
    # Cached, failures included: a missing compiler costs one attempt and one warning.
    return load_library(load_env().cache_dir / "cpu_ops")


def load_library(build_dir: Path) -> ctypes.CDLL | None:
    """Build (if needed) and load csrc/cpu_ops.cpp from build_dir; None, with a warning."""
    try:
        lib = build_native(SOURCE, build_dir)
    except NativeBuildError as err:
        logger.warning(f"C++ CPU ops unavailable, the torch code runs: {err}")
        return None
    for name, (argtypes, restype) in SIGNATURES.items():
        for suffix in SUFFIX.values():
            fn = getattr(lib, f"minisgl_cpu_{name}_{suffix}")
            fn.argtypes, fn.restype = argtypes, restype
    for suffix in SUFFIX.values():
        fn = getattr(lib, f"minisgl_cpu_decode_step_{suffix}")
        fn.argtypes = [ctypes.POINTER(DecodeModel), ctypes.POINTER(DecodeBatch)]
        fn.restype = ctypes.c_int64
    lib.minisgl_cpu_panel_dtypes.restype = ctypes.c_int
    for suffix in list(SUFFIX.values())[:lib.minisgl_cpu_panel_dtypes()]:
        getattr(lib, f"minisgl_cpu_pack_panels_{suffix}").argtypes = [_P, _I, _I, _P]
        getattr(lib, f"minisgl_cpu_linear_panels_{suffix}").argtypes = SIGNATURES["linear"][0]
    return lib


def _fn(name: str, dtype: torch.dtype):
    lib = _default_library()
    if lib is None:
        raise RuntimeError("the C++ CPU ops could not be built (see the warning)")
    return getattr(lib, f"minisgl_cpu_{name}_{SUFFIX[dtype]}")


def _rows(x: torch.Tensor, what: str) -> None:
    """x is a CPU matrix of a supported dtype whose rows are contiguous (the row stride may be
    larger than a row: a slice of a wider tensor)."""
    if not x.is_cpu or x.dtype not in DTYPES:
        raise ValueError(f"{what} must be an fp32 or bf16 CPU tensor, not {x.dtype} on {x.device}")
    if x.dim() != 2 or (x.shape[1] > 1 and x.stride(1) != 1) or x.stride(0) < x.shape[1]:
        raise ValueError(f"{what} must be a [rows, columns] matrix with contiguous rows")


def _vector(v: torch.Tensor | None, size: int, dtype: torch.dtype, what: str) -> None:
    if v is not None and (v.dtype != dtype or v.shape != (size,) or not v.is_contiguous()
                          or v.device.type != "cpu"):
        raise ValueError(f"{what} must be a contiguous {dtype} CPU vector of {size} values")


def takes(x: torch.Tensor, *_) -> bool:
    """A call these functions can run: a CPU tensor of fp32 or bf16 (the registry's rule)."""
    return isinstance(x, torch.Tensor) and x.is_cpu and x.dtype in DTYPES


PANEL = 16  # outputs per panel of packed weights (csrc/cpu_ops.cpp: kPanel)
PANEL_INPUTS = {torch.float32: 1, torch.bfloat16: 2}  # inputs per panel step: kIn


@functools.cache
def panel_dtypes() -> tuple[torch.dtype, ...]:
    """The dtypes whose weights this library packs into panels: fp32 where it was built with
    AVX-512, bf16 too where it has AVX-512 BF16; none elsewhere (an AVX2 CPU, no compiler)."""
    lib = _default_library() if available() else None
    if lib is None:
        return ()
    kinds = lib.minisgl_cpu_panel_dtypes()
    return (torch.float32, torch.bfloat16)[:kinds]


def can_pack_panels(weight: object) -> bool:
    """A plain [out, in] CPU weight that pack_panels takes: out a multiple of 16 and, in bf16, in
    even (the packed shape then tells both; every linear of the course's models is so)."""
    return (isinstance(weight, torch.Tensor) and weight.dtype in panel_dtypes()
            and weight.device.type == "cpu" and weight.dim() == 2 and not weight.is_mkldnn
            and weight.shape[0] % PANEL == 0 and weight.shape[1] % PANEL_INPUTS[weight.dtype] == 0
            and weight.numel() > 0)


def is_panels(weight: object) -> bool:
    return (isinstance(weight, torch.Tensor) and weight.dtype in PANEL_INPUTS
            and weight.dim() == 4 and tuple(weight.shape[2:]) == (PANEL, PANEL_INPUTS[weight.dtype])
            and weight.device.type == "cpu" and weight.is_contiguous())


def pack_panels(weight: torch.Tensor) -> torch.Tensor:
    """weight [out, in] -> [out / 16, in / kIn, 16, kIn] (kIn: 2 for bf16, 1 for fp32): element
    [p, t, i, j] is weight[16 p + i, kIn t + j], so that one 64-byte load holds the next kIn
    inputs of 16 outputs."""
    if not can_pack_panels(weight):
        raise ValueError("pack_panels takes a plain fp32 or bf16 [out, in] CPU weight with out a "
                         f"multiple of {PANEL} (and in even for bf16), on a CPU with AVX-512 "
                         "(AVX-512 BF16 for bf16)")
    n, k = weight.shape
    step = PANEL_INPUTS[weight.dtype]
    plain = weight.contiguous()
    packed = torch.empty(n // PANEL, k // step, PANEL, step, dtype=weight.dtype)
    _fn("pack_panels", weight.dtype)(plain.data_ptr(), n, k, packed.data_ptr())
    return packed


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
           ) -> torch.Tensor:
    """x [rows, in] @ weight[out, in]^T (+ bias) -> [rows, out]; weight may be pack_panels'."""
    _rows(x, "x")
    if is_panels(weight):
        return _linear_panels(x, weight, bias)
    if weight.dtype != x.dtype or weight.dim() != 2 or not weight.is_contiguous() \
            or weight.is_mkldnn or weight.shape[1] != x.shape[1] or weight.device.type != "cpu":
        raise ValueError(f"weight must be a contiguous {x.dtype} [out, {x.shape[1]}] CPU matrix")
    _vector(bias, weight.shape[0], x.dtype, "bias")
    rows, (n, k) = x.shape[0], weight.shape
    y = torch.empty(rows, n, dtype=x.dtype)
    if rows and n:
        _fn("linear", x.dtype)(x.data_ptr(), x.stride(0), weight.data_ptr(),
                               None if bias is None else bias.data_ptr(), y.data_ptr(), n, rows,
                               n, k, torch.get_num_threads())
    return y


def _linear_panels(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None
                   ) -> torch.Tensor:
    n, k = packed.shape[0] * PANEL, packed.shape[1] * packed.shape[3]
    if x.dtype != packed.dtype or x.shape[1] != k:
        raise ValueError(f"a packed {packed.dtype} weight [{n}, {k}] needs a {packed.dtype} input "
                         f"of {k} columns, not {x.dtype} of {x.shape[1]}")
    _vector(bias, n, x.dtype, "bias")
    rows = x.shape[0]
    y = torch.empty(rows, n, dtype=x.dtype)
    if rows:
        _fn("linear_panels", x.dtype)(x.data_ptr(), x.stride(0), packed.data_ptr(),
                                      None if bias is None else bias.data_ptr(), y.data_ptr(), n,
                                      rows, n, k, torch.get_num_threads())
    return y


def fused_add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                       eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual); x itself is the residual when residual is None."""
    _rows(x, "x")
    rows, dim = x.shape
    if residual is not None:
        _rows(residual, "residual")
        if residual.shape != x.shape or residual.dtype != x.dtype:
            raise ValueError("residual must have x's shape and dtype")
    _vector(weight, dim, x.dtype, "weight")
    out = torch.empty(rows, dim, dtype=x.dtype)
    new_residual = x if residual is None else torch.empty(rows, dim, dtype=x.dtype)
    if rows and dim:
        _fn("add_rmsnorm", x.dtype)(
            x.data_ptr(), x.stride(0), None if residual is None else residual.data_ptr(),
            0 if residual is None else residual.stride(0), weight.data_ptr(), eps, out.data_ptr(),
            new_residual.data_ptr(), rows, dim, torch.get_num_threads())
    return out, new_residual


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """x [rows, 2 * inter] = [gate | up] -> silu(gate) * up [rows, inter]."""
    _rows(x, "x")
    rows, width = x.shape
    if width % 2:
        raise ValueError(f"silu_and_mul needs an even number of columns, not {width}")
    out = torch.empty(rows, width // 2, dtype=x.dtype)
    if rows and width:
        _fn("silu_mul", x.dtype)(x.data_ptr(), x.stride(0), out.data_ptr(), rows, width // 2,
                                 torch.get_num_threads())
    return out


def rope(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         num_qo_heads: int, num_kv_heads: int, head_dim: int,
         q_norm_weight: torch.Tensor | None, k_norm_weight: torch.Tensor | None, eps: float
         ) -> tuple[torch.Tensor, torch.Tensor]:
    """ops.rope's contract: q [tokens, qo_heads, head_dim] and k [tokens, kv_heads, head_dim]
    from the q|k|v rows, normalised per head when norm weights are given, then rotated."""
    _rows(qkv, "qkv")
    tokens = qkv.shape[0]
    if head_dim <= 0 or head_dim % 2 or num_qo_heads <= 0 or num_kv_heads <= 0 \
            or qkv.shape[1] < (num_qo_heads + num_kv_heads) * head_dim:
        raise ValueError("qkv rows are narrower than the q and k heads, or head_dim is odd")
    if (q_norm_weight is None) != (k_norm_weight is None):
        raise ValueError("q and k norm weights come together or not at all")
    _vector(q_norm_weight, head_dim, qkv.dtype, "q_norm_weight")
    _vector(k_norm_weight, head_dim, qkv.dtype, "k_norm_weight")
    for name, table in (("cos", cos), ("sin", sin)):
        if table.dtype != torch.float32 or table.dim() != 2 or table.shape[1] != head_dim \
                or not table.is_contiguous() or table.shape != cos.shape:
            raise ValueError(f"{name} must be a contiguous fp32 [positions, {head_dim}] table")
    if positions.shape != (tokens,):
        raise ValueError(f"positions must hold one position per token ({tokens})")
    positions = positions.to(torch.int64).contiguous()  # a no-op for the engine's int64
    q = torch.empty(tokens, num_qo_heads, head_dim, dtype=qkv.dtype)
    k = torch.empty(tokens, num_kv_heads, head_dim, dtype=qkv.dtype)
    if tokens == 0:
        return q, k
    bad = _fn("rope", qkv.dtype)(
        qkv.data_ptr(), qkv.stride(0), positions.data_ptr(), cos.data_ptr(), sin.data_ptr(),
        cos.shape[0], None if q_norm_weight is None else q_norm_weight.data_ptr(),
        None if k_norm_weight is None else k_norm_weight.data_ptr(), eps, q.data_ptr(),
        k.data_ptr(), tokens, num_qo_heads, num_kv_heads, head_dim, torch.get_num_threads())
    if bad:
        raise IndexError(f"{bad} positions are outside the rotary tables' {cos.shape[0]} rows")
    return q, k


# ---- a whole decode step (engine/cpu_step.py fills these; csrc/cpu_ops.cpp has their twins) -----
class LayerWeights(ctypes.Structure):
    """One decoder layer's weights and K/V pools, as pointers (0 where a layer has none)."""

    _fields_ = [(name, ctypes.c_void_p) for name in (
        "input_norm", "qkv", "qkv_bias", "q_norm", "k_norm", "o_proj", "post_norm", "gate_up",
        "down", "k_cache", "v_cache")]


class DecodeModel(ctypes.Structure):
    _fields_ = [*((name, ctypes.c_int64) for name in (
        "num_layers", "hidden", "inter", "qo_heads", "kv_heads", "head_dim")),
        ("eps", ctypes.c_float), ("scale", ctypes.c_float),
        ("layers", ctypes.POINTER(LayerWeights)), ("final_norm", ctypes.c_void_p),
        ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p), ("table_rows", ctypes.c_int64),
        ("num_slots", ctypes.c_int64), ("page_table", ctypes.c_void_p),
        ("page_table_stride", ctypes.c_int64), ("page_table_rows", ctypes.c_int64),
        ("attention", ctypes.c_void_p), ("packed", ctypes.c_int64)]


class DecodeBatch(ctypes.Structure):
    _fields_ = [("size", ctypes.c_int64),
                *((name, ctypes.c_void_p) for name in (
                    "hidden", "out", "residual", "qkv", "q", "k", "attn", "gate_up", "act",
                    "positions", "out_loc", "table_rows", "kv_lens")),
                ("threads", ctypes.c_int)]


STEP_ERRORS = {  # csrc/cpu_ops.cpp's StepError
    1: "a position is outside the rotary tables",
    2: "a new token's K/V slot is outside the pool",
    3: "a page-table row or sequence length is outside the page table",
    4: "a page-table entry points outside the K/V pool",
}


def decode_step(model: DecodeModel, batch: DecodeBatch, dtype: torch.dtype) -> None:
    """Run every layer of one decode step (csrc/cpu_ops.cpp: decode_step); raises on bad input,
    which C++ checks before it writes anything but the K/V of earlier layers."""
    error = _fn("decode_step", dtype)(ctypes.byref(model), ctypes.byref(batch))
    if error:
        raise IndexError(f"CPU decode step refused its batch: {STEP_ERRORS.get(error, error)}")
