"""One-token GEMVs timed as a decode step runs them (chapter 26): 28 layers' weights, each its own
tensor, launched one after another inside a CUDA graph, so that every weight comes from HBM and
the per-kernel cost is the graph's (no launch from Python, no L2-flush kernel between runs as in
triton.testing.do_bench, whose ~5 us floor hid the int8 tiles' differences in quant_gemv.py).

    python benchmarks/gemv_chain.py                  # needs CUDA
    python benchmarks/gemv_chain.py --layers 28 --replays 4
    python benchmarks/gemv_chain.py --pdl            # bf16 only: without and with PDL (pdl.py)

For each of Qwen3-0.6B's projections, with the prologue the decode step fuses into it (qkv and
gate_up: RMSNorm with the residual add; down: SiLU-and-mul; o: none), it prints the bf16 GEMV with
its tiles (gemv_config), the int8 GEMV with the tiles it uses now (gemv_int8_config) and the best
int8 tiles of a sweep, in us per GEMV and the weight bytes per second; then the LM head in bf16 and
int8 for reference, and one line per shape `best-int8 <name> <N>x<K> <prologue> (BN, BK, warps)`.
With --pdl it compares, per shape, the bf16 GEMV launched plainly and with programmatic dependent
launch (kernel/triton/pdl.py: each GEMV loads its first weight tile while the previous one
finishes), then sweeps bf16 tiles with PDL: lines `pdl <name> off=<us> on=<us>` and
`best-bf16-pdl <name> <N>x<K> <prologue> (BN, BK, warps) <us>`.
"""

from __future__ import annotations

import argparse
import itertools

import torch
import triton
from gemv_shapes import graph_time_us  # benchmarks/ is on the path when this script runs

from minisgl.kernel.triton.gemv import _gemv_kernel, gemv_config
from minisgl.kernel.triton.quant_linear import gemv_int8_config
from minisgl.quant.quantize import quantize_int8

# name: (N, K, prologue)
SHAPES = {"qkv_proj": (4096, 1024, "norm"), "o_proj": (1024, 2048, "none"),
          "gate_up_proj": (6144, 1024, "norm"), "down_proj": (1024, 3072, "gated"),
          "lm_head": (151936, 1024, "none")}


def candidates(k: int) -> list[tuple[int, int, int]]:
    """Tilings whose threads each load 16 to 64 weights per tile (fewer starve the memory
    system; more spill registers)."""
    out = []
    for bn, bk, warps in itertools.product((1, 2, 4, 8, 16), (256, 512, 1024, 2048, 4096),
                                           (1, 2, 4, 8)):
        per_thread = bn * bk // (32 * warps)
        if bk <= max(triton.next_power_of_2(k), 256) and 16 <= per_thread <= 64:
            out.append((bn, bk, warps))
    return out


class Chain:
    """`layers` copies of one projection (fresh weights each) and their inputs."""

    def __init__(self, n: int, k: int, prologue: str, layers: int, int8: bool) -> None:
        g = torch.Generator(device="cuda").manual_seed(n * 7 + k)
        self.n, self.k, self.prologue = n, k, prologue
        self.weights, self.scales = [], []
        for _ in range(layers):
            w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g) * 0.02
            if int8:
                q, s = quantize_int8(w)
                self.weights.append(q)
                self.scales.append(s)
            else:
                self.weights.append(w)
            del w
        width = 2 if prologue == "gated" else 1
        self.x = torch.randn(1, width * k, device="cuda", dtype=torch.bfloat16, generator=g)
        self.residual = torch.randn(1, k, device="cuda", dtype=torch.bfloat16, generator=g)
        self.norm_w = torch.rand(k, device="cuda", dtype=torch.bfloat16, generator=g) + 0.5
        self.total = torch.empty(1, k, device="cuda", dtype=torch.bfloat16)
        self.out = torch.empty(1, n, device="cuda", dtype=torch.bfloat16)

    def launch(self, i: int, bn: int, bk: int, warps: int, pdl: bool = False) -> None:
        w = self.weights[i]
        extra: dict = {}
        if self.scales:
            extra.update(scale_ptr=self.scales[i], SCALED=True)
        if self.prologue == "norm":
            extra.update(r_ptr=self.residual, norm_w_ptr=self.norm_w, r_out_ptr=self.total,
                         eps=1e-6, NORM=True, RESIDUAL=True,
                         ROW_BLOCK=min(triton.next_power_of_2(self.k), 8192))
        elif self.prologue == "gated":
            extra.update(GATED=True)
        if pdl:
            extra.update(PDL=True, launch_pdl=True)
        _gemv_kernel[(triton.cdiv(self.n, bn),)](self.x, w, w, self.out, self.n, self.k,
                                                  w.stride(0), HAS_BIAS=False, BLOCK_N=bn,
                                                  BLOCK_K=bk, num_warps=warps, **extra)

    def time_us(self, config: tuple[int, int, int], replays: int, pdl: bool = False) -> float:
        """Microseconds per GEMV: gemv_shapes.py's CUDA-graph timing, one call per layer."""
        copies = len(self.weights)
        return graph_time_us(lambda i: self.launch(i, *config, pdl=pdl), copies,
                             reps=copies * replays)


def report(name: str, kind: str, config, us: float, nbytes: int) -> None:
    print(f"{name:<14} {kind:<30} {str(config):<16} {us:7.2f} us  {nbytes / us / 1e3:6.0f} GB/s",
          flush=True)


def sweep(chain: Chain, k: int, replays: int, pdl: bool) -> list[tuple[float, tuple]]:
    """The candidate tilings, timed with one replay each; the three best timed again with every
    replay, fastest first."""
    timed = []
    for config in candidates(k):
        try:
            timed.append((chain.time_us(config, 1, pdl), config))
        except Exception as e:  # a tiling the compiler refuses (registers, shared memory)
            print(f"  {config}: {type(e).__name__}")
    timed.sort()
    return sorted((chain.time_us(config, replays, pdl), config) for _us, config in timed[:3])


def pdl_main(args: argparse.Namespace) -> None:
    """bf16 per shape: the tiles gemv_config picks, without and with PDL; then the PDL sweep."""
    best_lines = []
    for name, (n, k, prologue) in SHAPES.items():
        if name == "lm_head":
            continue
        chain = Chain(n, k, prologue, args.layers, int8=False)
        now, now_pdl = gemv_config(n, k, prologue), gemv_config(n, k, prologue, pdl=True)
        off = chain.time_us(now, args.replays)
        on = chain.time_us(now_pdl, args.replays, pdl=True)
        print(f"pdl {name} {n}x{k} ({prologue}) {now}/{now_pdl} off={off:.2f} on={on:.2f} us "
              f"({n * k * 2 / on / 1e3:.0f} GB/s with PDL)", flush=True)
        best = sweep(chain, k, args.replays, pdl=True)
        for us, config in best:
            report(f"{name} {n}x{k}", f"bf16 pdl sweep ({prologue})", config, us, n * k * 2)
        best_lines.append(f"best-bf16-pdl {name} {n}x{k} {prologue} {best[0][1]} {best[0][0]:.2f}")
        del chain
        torch.cuda.empty_cache()
    print("\n".join(best_lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=28)
    ap.add_argument("--replays", type=int, default=4, help="passes over the layers per graph")
    ap.add_argument("--pdl", action="store_true", help="bf16 without and with PDL, and a PDL "
                    "sweep of bf16 tiles (no int8)")
    args = ap.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}"
          f", {args.layers} layers per graph")
    if args.pdl:
        pdl_main(args)
        return
    best_lines = []
    for name, (n, k, prologue) in SHAPES.items():
        layers = 2 if name == "lm_head" else args.layers  # one head, but never twice from L2
        label = f"{name} {n}x{k}"
        bf16 = Chain(n, k, prologue, layers, int8=False)
        report(label, f"bf16 ({prologue})", gemv_config(n, k, prologue),
               bf16.time_us(gemv_config(n, k, prologue), args.replays), n * k * 2)
        del bf16
        int8 = Chain(n, k, prologue, layers, int8=True)
        now = gemv_int8_config(n, k, prologue)
        report(label, f"int8 now ({prologue})", now, int8.time_us(now, args.replays), n * k)
        if name == "lm_head":
            continue
        best = sweep(int8, k, args.replays, pdl=False)
        for us, config in best:
            report(label, f"int8 sweep ({prologue})", config, us, n * k)
        best_lines.append(f"best-int8 {name} {n}x{k} {prologue} {best[0][1]}")
        del int8
        torch.cuda.empty_cache()
    print("\n".join(best_lines))


if __name__ == "__main__":
    main()
