"""Attention on the CPU over the paged pool, one layer of SmolLM2's heads (9 query heads over 3
KV heads of 64): when a prefill pays to go through the C++ kernel (attention/cpu.py), and what a
decode layer costs when the pools are bigger than the caches (issue 33).

    python benchmarks/cpu_prefill_attention.py [--repeat 3]

Prefill: the cpu backend's kernel path (every new token a row of the decode kernel, its sequence
ending at its own position) against the torch backend (SDPA per request), on the same pool and
batch, for three 130-token prompts, one of 512, one of 2048, 2048 new tokens after 6144 cached
ones, and one of 8192; bf16 and fp32. Decode: 17 requests of 130-300 tokens, the layer's pool
either one of 30 distinct pools (as in a real step: nothing left in the caches from the layer
before) or the same pool every time (in the caches). Times are the mean of --repeat calls.
"""

from __future__ import annotations

import argparse
import time

import torch

from minisgl.attention import TorchNativeBackend
from minisgl.attention.cpu import CpuBackend
from minisgl.core import Batch, Req, SamplingParams
from minisgl.kernel import cpu_attention
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64
PREFILLS = {"3 x 130": [(0, 130)] * 3, "1 x 512": [(0, 512)], "1 x 2048": [(0, 2048)],
            "2048 after 6144": [(6144, 2048)], "1 x 8192": [(0, 8192)]}


def mean_ms(fn, repeat: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat * 1000


def prefill_case(spec: list[tuple[int, int]], dtype: torch.dtype, repeat: int
                 ) -> tuple[float, float]:
    """(kernel ms, SDPA ms) of one layer of this prefill batch: (cached, new) per request."""
    gen = torch.Generator().manual_seed(len(spec) * 100 + spec[0][1])
    width = max(c + n for c, n in spec)
    slots = width * len(spec) + 1
    pool = MHAKVCache(KVPoolConfig(num_layers=1, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                                   num_pages=slots, page_size=1, dtype=dtype,
                                   device=torch.device("cpu")))
    table = torch.randperm(slots, generator=gen).int()[: len(spec) * width].view(len(spec), width)
    reqs = [Req(uid=i, input_ids=[0] * (c + n), sampling_params=SamplingParams(), table_idx=i,
                cached_len=c, extend_len=n) for i, (c, n) in enumerate(spec)]
    batch = Batch(reqs, "prefill")
    batch.out_loc = torch.cat([table[r.table_idx, r.cached_len:r.seq_len].long() for r in reqs])
    tokens = len(batch.out_loc)
    q, k, v = (torch.randn(tokens, h, HEAD_DIM, generator=gen).to(dtype)
               for h in (HEADS, KV_HEADS, KV_HEADS))
    times = []
    for backend in (CpuBackend(pool, table, HEADS, KV_HEADS),
                    TorchNativeBackend(pool, table, HEADS, KV_HEADS)):
        if isinstance(backend, CpuBackend):  # the kernel's path, whatever the rule would pick
            backend.kernel_prefills = lambda _batch: True
        backend.prepare_metadata(batch)
        times.append(mean_ms(lambda b=backend: b.forward(q, k, v, 0, batch), repeat))
    return times[0], times[1]


def decode_layer_us(distinct_pools: bool, repeat: int) -> float:
    gen = torch.Generator().manual_seed(7)
    lens = torch.randint(130, 300, (17,), generator=gen)
    slots = int(lens.sum()) * 2
    pools = [tuple(torch.randn(slots, KV_HEADS, HEAD_DIM, generator=gen).bfloat16()
                   for _ in range(2)) for _ in range(30 if distinct_pools else 1)]
    table = torch.zeros(17, 512, dtype=torch.int32)
    order = torch.randperm(slots // 16, generator=gen)
    used = 0
    for row, n in enumerate(lens.tolist()):
        for page in range((n + 15) // 16):
            start = int(order[used]) * 16
            table[row, page * 16:(page + 1) * 16] = torch.arange(start, start + 16)
            used += 1
    rows, q = torch.arange(17), torch.randn(17, HEADS, HEAD_DIM, generator=gen).bfloat16()

    def step() -> None:
        for k_pool, v_pool in pools * (30 // len(pools)):
            cpu_attention.decode_attention(q, k_pool, v_pool, table, rows, lens, 0.125,
                                           check=False)

    return mean_ms(step, repeat) * 1000 / 30


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"CPU: {torch.get_num_threads()} torch threads, torch {torch.__version__} "
          f"({torch.backends.cpu.get_cpu_capability()}); vdpbf16ps in the kernel: "
          f"{cpu_attention.has_dpbf16()}; one layer, {HEADS} query heads over {KV_HEADS} KV "
          f"heads of {HEAD_DIM}")
    for dtype in (torch.bfloat16, torch.float32):
        for name, spec in PREFILLS.items():
            kernel, sdpa = prefill_case(spec, dtype, args.repeat)
            print(f"prefill {str(dtype)[6:]:8s} {name:16s} kernel {kernel:8.2f} ms  "
                  f"sdpa {sdpa:8.2f} ms  sdpa/kernel {sdpa / kernel:.2f}")
    for distinct in (True, False):
        where = "30 distinct pools (beyond the caches)" if distinct else "one pool (in the caches)"
        print(f"decode bf16 17 requests of 130-300 tokens, {where}: "
              f"{decode_layer_us(distinct, args.repeat * 3):.1f} us/layer")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
