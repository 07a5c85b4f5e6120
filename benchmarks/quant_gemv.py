"""One-token products of Qwen3-0.6B's projections on a GPU (chapter 26): bf16 against int8 and fp8
weights, each kernel timed alone with its weight read from HBM (triton.testing.do_bench empties
L2 between runs), as in a batch-1 decode step.

    python benchmarks/quant_gemv.py            # needs CUDA; prints one line per shape and kernel

Kernels: cuBLAS bf16 (F.linear), chapter 20's bf16 GEMV, the int8 GEMV (the same kernel with
row scales) with the tiling gemv_config picks for bf16 and the best of a small sweep of tilings,
and fp8 (per-token quantization kernel + torch._scaled_mm). GB/s counts the weight's bytes only.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from minisgl.kernel.triton import gemv, gemv_int8
from minisgl.kernel.triton.gemv import _gemv_kernel, gemv_config
from minisgl.ops.quant_gpu import linear_fp8_scaled_mm
from minisgl.quant.quantize import quantize_fp8, quantize_int8

SHAPES = {"qkv_proj": (4096, 1024), "o_proj": (1024, 2048), "gate_up_proj": (6144, 1024),
          "down_proj": (1024, 3072)}
SWEEP = list(itertools.product((2, 4, 8, 16), (512, 1024, 2048, 4096), (4, 8)))


def int8_gemv_with(x, q, scale, block_n: int, block_k: int, warps: int) -> torch.Tensor:
    n, k = q.shape
    out = torch.empty(1, n, dtype=x.dtype, device=x.device)
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, q, q, out, n, k, q.stride(0), HAS_BIAS=False,
                                             BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps,
                                             scale_ptr=scale, SCALED=True)
    return out


def line(shape: str, kernel: str, fn, nbytes: int) -> None:
    us = do_bench(fn, warmup=25, rep=100) * 1000
    print(f"{shape:<24} {kernel:<40} {us:8.2f} us  {nbytes / us / 1e3:7.0f} GB/s", flush=True)


def bench_shape(name: str, n: int, k: int) -> None:
    shape = f"{name} {n}x{k}"
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    q, scale = quantize_int8(w)
    f8, f8_scale = quantize_fp8(w)
    line(shape, "cublas bf16", lambda: F.linear(x, w), w.nbytes)
    line(shape, "gemv bf16 (ch. 20)", lambda: gemv(x, w), w.nbytes)
    line(shape, f"gemv int8 {gemv_config(n, k)} (bf16 tiling)", lambda: gemv_int8(x, q, scale),
         q.nbytes)
    best = min(SWEEP, key=lambda c: do_bench(lambda: int8_gemv_with(x, q, scale, *c), warmup=5,
                                             rep=20))
    line(shape, f"gemv int8 {best} (best of sweep)", lambda: int8_gemv_with(x, q, scale, *best),
         q.nbytes)
    line(shape, "fp8 quantize + scaled_mm", lambda: linear_fp8_scaled_mm(x, f8, f8_scale, None),
         f8.nbytes)


def main() -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    for name, (n, k) in SHAPES.items():
        bench_shape(name, n, k)


if __name__ == "__main__":
    main()
