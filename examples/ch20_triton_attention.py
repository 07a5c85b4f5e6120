"""Chapter 20: the Triton paged-attention kernels on a random paged KV pool, checked against dense
attention in plain torch (float64). Decode runs with one split and with several (flash-decoding),
extend runs new tokens on top of cached prefixes. Without a GPU the kernels run under Triton's
interpreter (small shapes); on a GPU the same checks run at a larger shape in bf16. Last, the fused
small kernels of a decoder layer (add + RMSNorm, q/k RMSNorm + RoPE, SiLU-and-mul) against the
ops' torch references, in fp32."""

from __future__ import annotations

import time

import torch

# Imported before anything else that could import triton: without a GPU it sets TRITON_INTERPRET.
from minisgl.kernel.triton import (
    choose_num_splits,
    decode_attention,
    extend_attention,
    fused_add_rms_norm,
    qk_norm_rope,
    silu_and_mul,
)
from minisgl.layers import RotaryEmbedding
from minisgl.ops.activation import silu_and_mul_torch as torch_silu_and_mul
from minisgl.ops.norm import rms_norm_torch as torch_rms_norm

ON_GPU = torch.cuda.is_available()
DEVICE = torch.device("cuda" if ON_GPU else "cpu")
# The interpreter keeps bf16 as raw 16-bit integers inside tl.dot, so the CPU run uses fp32.
DTYPE = torch.bfloat16 if ON_GPU else torch.float32
NUM_HEADS, NUM_KV_HEADS, HEAD_DIM, PAGE_SIZE = (16, 8, 128, 16) if ON_GPU else (8, 2, 64, 16)
# (cached prefix, new tokens) per request; decode sees prefix + new tokens as its context
REQS = [(0, 300), (4000, 1), (8000, 190)] if ON_GPU else [(0, 70), (40, 1), (600, 100)]
MAX_SEQ_LEN = max(c + n for c, n in REQS)


def random_layout(gen: torch.Generator):
    """A pool of shuffled pages; each request owns whole pages. Page-table entries past a
    request's length stay 0, a slot of some other request: reading past the end gives a wrong
    answer, not a crash."""
    pages = [-(-(c + n) // PAGE_SIZE) for c, n in REQS]
    order = torch.randperm(sum(pages), generator=gen).tolist()
    page_table = torch.zeros(len(REQS), MAX_SEQ_LEN, dtype=torch.int32)
    for row, (cached, new) in enumerate(REQS):
        own = torch.tensor([order.pop() for _ in range(pages[row])])
        slots = (own[:, None] * PAGE_SIZE + torch.arange(PAGE_SIZE)).flatten()
        page_table[row, : cached + new] = slots[: cached + new]
    num_slots = sum(pages) * PAGE_SIZE
    k_cache = torch.randn(num_slots, NUM_KV_HEADS, HEAD_DIM, generator=gen)
    v_cache = torch.randn(num_slots, NUM_KV_HEADS, HEAD_DIM, generator=gen)
    return k_cache, v_cache, page_table


def dense(q, k_cache, v_cache, slots, q_positions) -> torch.Tensor:
    """Causal attention of q [n, H, D] at q_positions over the keys in `slots`, in float64."""
    group = NUM_HEADS // NUM_KV_HEADS
    k = k_cache[slots].double().repeat_interleave(group, 1)
    v = v_cache[slots].double().repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) * HEAD_DIM ** -0.5
    visible = torch.arange(len(slots), device=q.device)[None, :] <= q_positions[:, None]
    return torch.einsum("hqk,khd->qhd", scores.masked_fill(~visible, float("-inf")).softmax(-1), v)


def fused_small_kernels(gen: torch.Generator) -> None:
    """The decoder layer's fused kernels against the layers' torch code (run on the CPU)."""
    hidden, inter, tokens = 256, 384, 5
    x, residual = torch.randn(tokens, hidden, generator=gen), torch.randn(tokens, hidden,
                                                                          generator=gen)
    weight = torch.randn(hidden, generator=gen)
    out, total = fused_add_rms_norm(x.to(DEVICE), residual.to(DEVICE), weight.to(DEVICE), 1e-6)
    expected = torch_rms_norm(x + residual, weight, 1e-6)
    print(f"add + RMSNorm, one kernel: max |diff| vs torch {(out.cpu() - expected).abs().max():.2e}")
    rotary = RotaryEmbedding(HEAD_DIM, 1024, 1e6)
    qkv = torch.randn(tokens, (NUM_HEADS + 2 * NUM_KV_HEADS) * HEAD_DIM, generator=gen)
    positions = torch.randperm(1024, generator=gen)[:tokens]
    q_w, k_w = torch.randn(HEAD_DIM, generator=gen), torch.randn(HEAD_DIM, generator=gen)
    q, k, _ = qkv.split([NUM_HEADS * HEAD_DIM, NUM_KV_HEADS * HEAD_DIM,
                         NUM_KV_HEADS * HEAD_DIM], dim=-1)
    q_ref = torch_rms_norm(q.reshape(tokens, NUM_HEADS, HEAD_DIM), q_w, 1e-6)
    k_ref = torch_rms_norm(k.reshape(tokens, NUM_KV_HEADS, HEAD_DIM), k_w, 1e-6)
    q_ref, k_ref = rotary.forward(positions, q_ref, k_ref)
    q, k = qk_norm_rope(qkv.to(DEVICE), positions.to(DEVICE), rotary._cos.to(DEVICE),
                        rotary._sin.to(DEVICE), NUM_HEADS, NUM_KV_HEADS, HEAD_DIM,
                        q_w.to(DEVICE), k_w.to(DEVICE), 1e-6)
    worst = max((q.cpu() - q_ref).abs().max(), (k.cpu() - k_ref).abs().max())
    print(f"q/k RMSNorm + RoPE, one kernel for q and k: max |diff| vs torch {worst:.2e}")
    gate_up = torch.randn(tokens, 2 * inter, generator=gen)
    diff = (silu_and_mul(gate_up.to(DEVICE)).cpu() - torch_silu_and_mul(gate_up)).abs().max()
    print(f"SiLU-and-mul, one kernel: max |diff| vs torch {diff:.2e}")


def main() -> None:
    began = time.perf_counter()
    gen = torch.Generator().manual_seed(20)
    k_cache, v_cache, page_table = (t.to(DEVICE) for t in random_layout(gen))
    k_cache, v_cache = k_cache.to(DTYPE), v_cache.to(DTYPE)
    table_idx = torch.arange(len(REQS), dtype=torch.int32, device=DEVICE)
    kv_lens = torch.tensor([c + n for c, n in REQS], dtype=torch.int32, device=DEVICE)
    where = "GPU, compiled" if ON_GPU else "CPU, Triton interpreter"
    print(f"{where}: {NUM_HEADS} query heads over {NUM_KV_HEADS} KV heads, head_dim {HEAD_DIM}, "
          f"{DTYPE}, page size {PAGE_SIZE}, requests (cached, new) = {REQS}")

    # Decode: one query per request at its last position.
    q = torch.randn(len(REQS), NUM_HEADS, HEAD_DIM, generator=gen).to(DEVICE, DTYPE)
    expected = torch.stack([
        dense(q[b : b + 1], k_cache, v_cache, page_table[b, :n].long(),
              torch.tensor([n - 1], device=DEVICE))[0]
        for b, n in enumerate(kv_lens.tolist())])
    picked = choose_num_splits(len(REQS), NUM_KV_HEADS, MAX_SEQ_LEN, DEVICE)
    for splits in sorted({1, 4, picked}):
        out = decode_attention(q, k_cache, v_cache, page_table, table_idx, kv_lens,
                               num_splits=splits)
        note = " (what choose_num_splits picks here)" if splits == picked else ""
        print(f"decode, {splits} split(s){note}: max |diff| vs dense "
              f"{(out.double() - expected).abs().max():.2e}")

    # Extend: every request's new tokens in one launch, over its cached prefix and causally.
    q_lens = [n for _, n in REQS]
    q = torch.randn(sum(q_lens), NUM_HEADS, HEAD_DIM, generator=gen).to(DEVICE, DTYPE)
    cu_q_lens = torch.tensor([0, *q_lens], device=DEVICE).cumsum(0).int()
    out = extend_attention(q, k_cache, v_cache, page_table, table_idx, cu_q_lens, kv_lens,
                           max(q_lens))
    worst = 0.0
    for b, (cached, n) in enumerate(REQS):
        rows = slice(int(cu_q_lens[b]), int(cu_q_lens[b + 1]))
        expected = dense(q[rows], k_cache, v_cache, page_table[b, : cached + n].long(),
                         torch.arange(cached, cached + n, device=DEVICE))
        worst = max(worst, (out[rows].double() - expected).abs().max().item())
    print(f"extend, {sum(q_lens)} new tokens over prefixes {[c for c, _ in REQS]}: "
          f"max |diff| vs dense {worst:.2e}")
    fused_small_kernels(gen)
    print(f"took {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
