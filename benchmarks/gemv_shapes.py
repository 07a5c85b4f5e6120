"""Batch-1 matrix-vector products of Qwen3-0.6B's decode step: cuBLAS (through torch) against a
plain Triton GEMV, each timed as CUDA-graph replays in the same run.

    python benchmarks/gemv_shapes.py

A batch-1 decode step is mostly its four weight products per layer, and at batch 1 each is a
matrix-vector product bound by reading the weight once. The profile of a replay
(benchmarks/profile_decode_step.py) showed cuBLAS picking tiles that read the weights at well
under the H200's bandwidth for these shapes; this prints, per shape, what each way reaches,
and the best tiling of the Triton kernel that kernel/triton/gemv.py's gemv_config encodes, for
the plain GEMV and for its RMSNorm and SiLU-and-mul prologues at the shapes the engine fuses them.
"""

from __future__ import annotations

import itertools

import torch
import triton

from minisgl.kernel.triton.gemv import _gemv_kernel, gemv_config
from minisgl.ops import rms_norm, silu_and_mul

# (name, out_features, in_features, prologue) of one Qwen3-0.6B layer, and the LM head. On the
# one-token path (ops.fused_add_rms_norm_linear, ops.silu_and_mul_linear) qkv_proj and
# gate_up_proj compute the RMSNorm of their input first (prologue "norm", with the residual add) and down_proj the SiLU-and-mul
# ("gated"); the plain rows are the GEMV alone, as the unfused path and the LM head run it.
SHAPES = [("qkv_proj", 4096, 1024, "none"), ("o_proj", 1024, 2048, "none"),
          ("gate_up_proj", 6144, 1024, "none"), ("down_proj", 1024, 3072, "none"),
          ("lm_head", 151936, 1024, "none"),
          ("qkv_proj", 4096, 1024, "norm"), ("gate_up_proj", 6144, 1024, "norm"),
          ("down_proj", 1024, 3072, "gated")]


def triton_gemv(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, block_n: int, block_k: int,
                num_warps: int, prologue: dict) -> torch.Tensor:
    """The engine's GEMV kernel (kernel/triton/gemv.py) with the tiling given, not its table's;
    `prologue` holds the kernel's prologue arguments (empty for the plain GEMV)."""
    n, k = w.shape
    _gemv_kernel[(triton.cdiv(n, block_n),)](x, w, w, out, n, k, w.stride(0), HAS_BIAS=False,
                                             BLOCK_N=block_n, BLOCK_K=block_k,
                                             num_warps=num_warps, **prologue)
    return out


def inputs(k: int, prologue: str, dtype: torch.dtype) -> tuple[torch.Tensor, dict, torch.Tensor]:
    """(x, the kernel's prologue arguments, the GEMV's input as fp32) for one token."""
    if prologue == "gated":
        x = torch.randn(1, 2 * k, device="cuda", dtype=dtype)
        return x, {"GATED": True}, silu_and_mul(x).float()
    x = torch.randn(1, k, device="cuda", dtype=dtype)
    if prologue == "none":
        return x, {}, x.float()
    residual = torch.randn(1, k, device="cuda", dtype=dtype)
    norm_w = 1 + 0.1 * torch.randn(k, device="cuda", dtype=dtype)
    total = torch.empty_like(x)
    args = {"r_ptr": residual, "norm_w_ptr": norm_w, "r_out_ptr": total, "eps": 1e-6,
            "NORM": True, "RESIDUAL": True, "ROW_BLOCK": min(triton.next_power_of_2(k), 8192)}
    return x, args, rms_norm(x + residual, norm_w, 1e-6).float()


def graph_time_us(fn, copies: int, reps: int = 50) -> float:
    """Median time of one call, from CUDA-graph replays of `reps` calls; call i reads weight copy
    i % copies, so that the weights come from HBM as in a decode step (28 layers of weights do
    not fit the 50 MB L2; one matrix replayed 50 times does, and that flattered the first run
    of this script: 11.2 us per layer here, 16 us per layer in the engine's profile)."""
    fn(0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(reps):
            fn(i % copies)
    times = []
    for _ in range(10):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / reps)
    return sorted(times)[len(times) // 2]


def main() -> int:
    torch.manual_seed(0)
    dtype = torch.bfloat16
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__};"
          f" batch 1, bf16, each timed as CUDA-graph replays reading weights from HBM (not L2)")
    total_best = total_linear = 0.0
    for name, n, k, prologue in SHAPES:
        # enough copies of the weight to be well past the L2 (200 MB); the LM head alone is 311 MB
        copies = max(1, -(-(200 << 20) // (n * k * 2)))
        ws = [torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5 for _ in range(copies)]
        w = ws[0]
        x, args, x_in = inputs(k, prologue, dtype)
        ref = torch.nn.functional.linear(x_in, w.float())
        gb = w.numel() * w.element_size() / 1e9
        results = {}
        if prologue == "none":  # cuBLAS has no prologue: compared on the plain rows only
            wts = [w.t().contiguous() for w in ws]
            results = {
                "F.linear": graph_time_us(lambda i: torch.nn.functional.linear(x, ws[i]), copies),
                "torch.mv": graph_time_us(lambda i: torch.mv(ws[i], x[0]), copies),
                "x @ W^T (W^T stored)": graph_time_us(lambda i: torch.mm(x, wts[i]), copies),
            }
        out = torch.full((n,), float("nan"), device="cuda", dtype=dtype)
        best_cfg, best_t = None, float("inf")
        for bn, bk, warps in itertools.product([1, 2, 4, 8, 16], [256, 512, 1024, 2048, 4096],
                                               [2, 4, 8]):
            if bn * bk > 32768 or bk > triton.next_power_of_2(k):
                continue
            out.fill_(float("nan"))
            triton_gemv(x, w, out, bn, bk, warps, args)
            err = (out.float() - ref[0]).abs().max().item()
            if not err < 0.05:
                print(f"  WRONG triton {prologue} {bn=} {bk=} {warps=}: max err {err}")
                continue
            t = graph_time_us(lambda i: triton_gemv(x, ws[i], out, bn, bk, warps, args), copies)
            if t < best_t:
                best_cfg, best_t = (bn, bk, warps), t
        engine_cfg = gemv_config(n, k, prologue)
        results[f"triton gemv, engine's {engine_cfg}"] = graph_time_us(
            lambda i: triton_gemv(x, ws[i], out, *engine_cfg, args), copies)
        results[f"triton gemv {best_cfg}"] = best_t
        line = "  ".join(f"{label} {t:6.1f} us ({gb / (t / 1e6) / 1000:4.2f} TB/s)"
                         for label, t in results.items())
        print(f"{name:13s} {n:6d} x {k:4d} prologue {prologue:5s}: {line}")
        if prologue == "none":
            total_linear += results["F.linear"]
            total_best += min(results.values())
    print(f"sum over the plain shapes: F.linear {total_linear:.1f} us, best of each "
          f"{total_best:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
