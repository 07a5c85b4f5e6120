"""The matrix multiplies of one SmolLM2 decode step on the CPU: torch's F.linear on plain weights
against oneDNN on weights packed once (ops/cpu_impls.py) and the C++ linear over plain weights
(kernel/cpu_ops.py), fp32 and bf16, for 1, 8 and 32 rows (the batch of a decode step), beside
the speed `torch.sum` reads memory at; and the C++ linear over pack_panels' panels ("panels":
AVX-512's FMA for fp32, vdpbf16ps for bf16). Where oneDNN cannot multiply bf16 (no AVX-512), or
the library has no panels for the dtype, the column says n/a.

    python benchmarks/cpu_linear_packing.py [--repeat 5] [--rows 1,8,32] [--layers 30]
                                            [--dtypes float32,bfloat16]

Thirty layers of distinct random weights in SmolLM2-135M's shapes plus its LM head, so that no
weight stays in a cache between two uses: the figure is ms per step and the GB/s it reads.
Above 32 rows (a prefill, which computes logits for its last tokens only) the LM head is left out
and GFLOP/s are printed too: there the multiply-adds, not the bytes, set the time.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.nn.functional as F

from minisgl.kernel import cpu_ops
from minisgl.ops.cpu_impls import linear_onednn, pack_weight, packs

# SmolLM2-135M: hidden 576, intermediate 1536, 9 query and 3 KV heads of 64, vocabulary 49152
LAYER_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # qkv, o, gate_up, down
LAYERS = 30
LM_HEAD = (49152, 576)


def weights(dtype: torch.dtype, layers: int = LAYERS) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    shapes = LAYER_SHAPES * layers + [LM_HEAD]
    return [torch.randn(shape, generator=gen).to(dtype) for shape in shapes]


def ms_per_step(ws: list[torch.Tensor], rows: int, how: str, repeat: int) -> float:
    """how: "plain" (F.linear), "packed" (oneDNN), "cpp" (kernel/cpu_ops.py) or "panels" (its
    linear over pack_panels' panels)."""
    dtype = ws[0].dtype
    inputs = {k: torch.randn(rows, k).to(dtype) for k in {w.shape[1] for w in ws}}
    fn = {"plain": F.linear, "packed": linear_onednn, "cpp": cpu_ops.linear,
          "panels": cpu_ops.linear}[how]
    pairs = [(w.shape[1], w) for w in ws]
    if how == "packed":
        pairs = [(k, pack_weight(w)) for k, w in pairs]
    elif how == "panels":
        pairs = [(k, cpu_ops.pack_panels(w)) for k, w in pairs]

    def step() -> None:
        for k, w in pairs:
            fn(inputs[k], w)

    step()
    start = time.perf_counter()
    for _ in range(repeat):
        step()
    return (time.perf_counter() - start) / repeat * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", default="1,8,32", help="comma-separated rows (batch) to time")
    parser.add_argument("--layers", type=int, default=LAYERS, help="layers of weights (+ LM head)")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    args = parser.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    print(f"CPU: {os.cpu_count()} cores, {torch.get_num_threads()} torch threads, torch "
          f"{torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); SmolLM2-135M's "
          f"{args.layers} layers + LM head, distinct random weights; mean of {args.repeat} steps")
    big = torch.randn(135_000_000)
    big.sum()
    start = time.perf_counter()
    for _ in range(args.repeat):
        big.sum()
    seconds = (time.perf_counter() - start) / args.repeat
    print(f"torch.sum reads fp32 at {big.numel() * 4 / seconds / 1e9:.1f} GB/s")
    del big
    for dtype in (getattr(torch, name) for name in args.dtypes.split(",")):
        all_weights = weights(dtype, args.layers)
        for rows in rows_list:
            ws = all_weights if rows <= 32 else all_weights[:-1]  # no LM head in a prefill
            nbytes = sum(w.numel() for w in ws) * ws[0].element_size()
            flops = 2 * sum(w.numel() for w in ws)  # per row
            line = f"{str(dtype).removeprefix('torch.'):8s} rows {rows:2d}:"
            hows = [("plain", "F.linear"), ("packed", "packed"), ("cpp", "C++"),
                    ("panels", "panels")]
            for how, label in hows:
                if (how == "packed" and not packs(dtype)) \
                        or (how == "cpp" and not cpu_ops.available()) \
                        or (how == "panels" and dtype not in cpu_ops.panel_dtypes()):
                    line += f"  {label} n/a"
                    continue
                ms = ms_per_step(ws, rows, how, args.repeat)
                line += f"  {label} {ms:6.1f} ms ({nbytes / ms / 1e6:4.1f} GB/s"
                line += f", {flops * rows / ms / 1e6:3.0f} GFLOP/s)" if rows > 32 else ")"
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
