"""Chapter 5: a paged KV pool sized for SmolLM2, and store_kv writing rows at scattered slots."""

from __future__ import annotations

import time

import torch

from minisgl import ops
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache


def main() -> None:
    # SmolLM2-135M: 30 layers, 3 KV heads of 64 dims; Qwen3-0.6B for comparison
    for name, layers, heads, dim, dtype in (("SmolLM2-135M", 30, 3, 64, torch.float32),
                                            ("Qwen3-0.6B", 28, 8, 128, torch.bfloat16)):
        cfg = KVPoolConfig(layers, heads, dim, num_pages=1, page_size=1, dtype=dtype,
                           device=torch.device("cpu"))
        print(f"{name}: {cfg.bytes_per_token / 1024:.0f} KiB of K+V per token "
              f"({str(dtype).removeprefix('torch.')}); 1 GiB holds {(1 << 30) // cfg.bytes_per_token}"
              " tokens")

    cfg = KVPoolConfig(num_layers=30, num_kv_heads=3, head_dim=64, num_pages=32, page_size=16,
                       dtype=torch.float32, device=torch.device("cpu"))
    pool = MHAKVCache(cfg)
    print(f"pool: {cfg.num_pages} pages x {cfg.page_size} slots = {cfg.num_slots} tokens")
    # a request of 20 tokens living in pages 7 and 3 (not contiguous): slots of positions 0..19
    slots = torch.cat([torch.arange(7 * 16, 8 * 16), torch.arange(3 * 16, 3 * 16 + 4)])
    k, v = torch.randn(20, 3, 64), torch.randn(20, 3, 64)
    pool.store_kv(k, v, slots, layer_id=5)
    same = torch.equal(pool.k_cache(5)[slots], k) and torch.equal(pool.v_cache(5)[slots], v)
    print(f"store_kv wrote 20 tokens at slots {slots[:3].tolist()}...{slots[-2:].tolist()}; "
          f"read back identical: {same}")
    shard = ops.embedding(torch.randn(10, 4), torch.tensor([3, 12, 15]), 10, 10)  # start, length
    print("embedding on the vocab shard [10, 20): ids 3, 12, 15 ->",
          ["zeros" if not r.any() else "row" for r in shard])


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
