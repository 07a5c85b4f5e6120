"""Decode attention on the CPU: the C++ kernel over the paged pool (attention/cpu.py) against the
torch backend's gather + SDPA, on one layer of a batch like the offline benchmark's busiest decode
steps (SmolLM2's 9 query heads over 3 KV heads of 64, 16-token pages in a shuffled pool).

    python benchmarks/cpu_attention.py [--batch 32] [--min-len 200] [--max-len 380] [--dtype bf16]

Both sides read the same pool and page table; each figure is the best of 8 rounds of 10 calls
(this 2-core VM is noisy), and the bytes of K/V the layer must read give each side's GB/s.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from minisgl.attention.torch_native import TorchNativeBackend
from minisgl.kernel import cpu_attention

HEADS, KV_HEADS, HEAD_DIM, PAGE = 9, 3, 64, 16


def best_ms(fn: Callable[[], object], calls: int = 10, rounds: int = 8) -> float:
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls * 1000)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--min-len", type=int, default=200)
    parser.add_argument("--max-len", type=int, default=380)
    parser.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    args = parser.parse_args()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    if not cpu_attention.available():
        raise SystemExit("the C++ kernel could not be built here (see the warning above)")
    gen = torch.Generator().manual_seed(0)
    lens = torch.randint(args.min_len, args.max_len + 1, (args.batch,), generator=gen)
    pages = int(sum((n + PAGE - 1) // PAGE for n in lens.tolist())) * 2
    k = torch.randn(pages * PAGE, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
    v = torch.randn(pages * PAGE, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
    table = torch.zeros(args.batch, args.max_len, dtype=torch.int32)
    order, used = torch.randperm(pages, generator=gen), 0
    for b, n in enumerate(lens.tolist()):
        own = order[used:used + (n + PAGE - 1) // PAGE]
        used += len(own)
        table[b, :n] = (own[:, None] * PAGE + torch.arange(PAGE)).flatten()[:n].int()
    q = torch.randn(args.batch, HEADS, HEAD_DIM, generator=gen).to(dtype)
    rows = torch.arange(args.batch, dtype=torch.int64)
    kv_lens = lens.to(torch.int64)

    # the torch backend's decode, as the engine runs it (its groups built once per step)
    class Pool:  # the two methods of MHAKVCache the backend reads
        def k_cache(self, _layer: int) -> torch.Tensor:
            return k

    backend = TorchNativeBackend.__new__(TorchNativeBackend)
    backend.kv_cache, backend.groups = Pool(), HEADS // KV_HEADS
    slots = [table[b, :n].long() for b, n in enumerate(lens.tolist())]
    meta = type("Meta", (), {"kv_lens": lens.tolist(), "kv_slots": slots})()
    groups = backend._decode_groups(meta, torch.device("cpu"))
    meta.decode_groups = groups

    def ours() -> torch.Tensor:
        return cpu_attention.decode_attention(q, k, v, table, rows, kv_lens, HEAD_DIM ** -0.5,
                                              check=False)

    def theirs() -> torch.Tensor:
        return backend._decode(q, k, v, meta)

    err = (ours().float() - theirs().float()).abs().max().item()
    mb = 2 * int(lens.sum()) * KV_HEADS * HEAD_DIM * k.element_size() / 1e6
    a, b = best_ms(ours), best_ms(theirs)
    print(f"{args.batch} requests of {args.min_len}-{args.max_len} tokens, {args.dtype}, "
          f"{torch.get_num_threads()} threads: {mb:.1f} MB of K/V per layer; max |diff| {err:.2e}")
    case = f"{args.dtype} batch {args.batch}"  # on every line, for the docs' figures
    print(f"{case}: C++ kernel over the pool {a:7.3f} ms/layer ({mb / a:5.1f} GB/s)")
    print(f"{case}: torch gather + SDPA      {b:7.3f} ms/layer ({mb / b:5.1f} GB/s)")
    print(f"{case}: speedup {b / a:.2f}x")


if __name__ == "__main__":
    main()
