"""The extend (prefill) kernel's tilings side by side, with FlashInfer's prefill where it imports.

    python benchmarks/tune_extend_attention.py            # a GPU (FlashInfer optional)
    python benchmarks/tune_extend_attention.py --smoke    # tiny shapes, Triton's interpreter

Qwen3-0.6B's heads (16 query, 8 KV, head dim 128), bf16, on the official bench.py's first prefill
batch (31 prompts, 15,705 tokens) and one 1024-token prompt, pages of one slot. Every tiling is
checked against SDPA first (benchmarks/peers/attention_kernels.py: poisoned output, relative
error at most 1e-2), then timed in a CUDA graph. Prints one line per tiling and shape,

    extend-tiling shape=<...> block_m=.. block_n=.. warps=.. stages=.. pack=.. ms=<x>

then `best-extend-tiling` per shape and, with FlashInfer, `extend-attention ratio=<fi/ours>` for
the engine's tiling (EXTEND_CONFIG) and the best one.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent / "peers"))
import attention_kernels as ak  # noqa: E402  (sets Triton's interpreter up on a CPU)

from minisgl.kernel.triton.extend_attention import EXTEND_CONFIG, ExtendConfig  # noqa: E402


def tilings(smoke: bool) -> list[ExtendConfig]:
    """The engine's tiling first, then the kernel before GQA packing (one head per tile, 64 rows,
    Triton's default warps and stages), then a grid; each tiling once."""
    if smoke:
        return [ExtendConfig(32, 16, 4, 1), ExtendConfig(32, 16, 4, 1, pack_gqa=False)]
    grid = [ExtendConfig(m, n, w, s) for m, n, w, s in itertools.product(
        (64, 128), (32, 64, 128), (4, 8), (2, 3)) if not (m == 64 and w == 8)]
    return list(dict.fromkeys([EXTEND_CONFIG, ExtendConfig(64, 64, 4, 3, pack_gqa=False), *grid]))


def describe(c: ExtendConfig) -> str:
    return (f"block_m={c.block_m} block_n={c.block_n} warps={c.num_warps} "
            f"stages={c.num_stages} pack={int(c.pack_gqa)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    heads = ak.SMOKE if args.smoke else ak.QWEN3_0_6B
    cases = [[30, 45, 17]] if args.smoke else [ak.official_prefill_lens(), [1024]]
    no_fi = "--smoke" if args.smoke else ak.flashinfer_ready(device)
    gen = torch.Generator().manual_seed(0)
    summary = []
    for lens in cases:
        layout = ak.paged_layout(lens, 1, gen)
        pool = ak.random_pool(layout, heads, device)
        q = torch.randn(sum(lens), heads.num_qo_heads, heads.head_dim, dtype=heads.dtype,
                        device=device)
        ref = ak.extend_reference(layout, pool, q)
        shape = ak.extend_shape(layout)
        iters = 1 if args.smoke else args.iters
        fi = None if no_fi else ak.run_case(f"flashinfer {shape}", ak.flashinfer_extend, layout,
                                            heads, [pool], q, ref, iters)
        times: dict[ExtendConfig, float] = {}
        for config in tilings(args.smoke):
            try:
                ms = ak.run_case(f"{describe(config)} {shape}",
                                 functools.partial(ak.triton_extend, config=config), layout,
                                 heads, [pool], q, ref, iters)
            except Exception as e:  # e.g. out of shared memory for a large tile
                print(f"FAIL {describe(config)}: {type(e).__name__}: {str(e)[:200]}")
                ms = None
            if ms is not None:
                times[config] = ms
                print(f"extend-tiling shape={shape} {describe(config)} ms={ms:.4f}", flush=True)
        if not times:
            continue
        best = min(times, key=times.get)
        summary.append(f"best-extend-tiling shape={shape} {describe(best)} ms={times[best]:.4f}")
        if fi is not None:
            for name, ms in (("engine", times.get(EXTEND_CONFIG)), ("best", times[best])):
                if ms is not None:
                    summary.append(f"extend-attention shape={shape} tiling={name} "
                                   f"flashinfer={fi:.4f} triton={ms:.4f} ratio={fi / ms:.3f}")
    print("\n".join(summary))
    return 1 if ak.FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
