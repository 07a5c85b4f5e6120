"""How many kernels one decode step launches: the torch ops of a decoder layer against chapter 20's
fused kernels.

    python benchmarks/count_decode_kernels.py     # CPU: the torch ops of each piece of a layer
    python benchmarks/count_decode_kernels.py     # GPU: also every kernel of a whole decode step

A CUDA graph removes the CPU's launch cost but not the GPU's: each kernel still costs a few
microseconds of GPU time to start, fill and drain, so a small model's decode step is bound by
how many kernels it has. On any machine, the pieces of one Qwen3-0.6B decoder layer (batch 1,
bf16) run through the torch code under torch.profiler; every top-level op that computes (not a
view, not a no-op cast) is one kernel launch on a GPU. Each fused piece is one launch by
construction; at batch 1 the two norms and SiLU-and-mul run inside the GEMV after them
(kernel/triton/gemv.py's prologues), so they add no launch of their own (the last column). On a
GPU, the profiler also counts the CUDA kernels of one eager decode step of Qwen3-0.6B (dummy
weights, Triton attention) through the scheduler at batch 1, with the fused kernels (the GEMV
prologues included) and with MINISGL_DISABLE_FUSED_KERNELS=1, sampling and metadata copies
included.
"""

from __future__ import annotations

import os
import sys
from unittest import mock

import torch
from torch.profiler import ProfilerActivity, profile

from minisgl.layers import RMSNorm, RMSNormFused, RotaryEmbedding
from minisgl.layers.attention import AttentionLayer
from minisgl.ops import silu_and_mul, triton_impls

# Ops that only make a new view of the same memory (or allocate): no kernel on a GPU.
VIEWS = {"aten::view", "aten::reshape", "aten::_reshape_alias", "aten::split", "aten::slice",
         "aten::chunk", "aten::narrow", "aten::unsqueeze", "aten::squeeze", "aten::transpose",
         "aten::expand", "aten::as_strided", "aten::alias", "aten::detach", "aten::empty",
         "aten::empty_like", "aten::empty_strided", "aten::select", "aten::t", "aten::permute",
         "aten::split_with_sizes", "aten::lift_fresh", "aten::result_type"}
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 1024, 16, 8, 128, 3072  # Qwen3-0.6B
DTYPE = torch.bfloat16


def torch_launches(fn) -> tuple[int, list[str]]:
    """Top-level ops of fn that compute; `aten::to` counts only when it copies."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = []
    for e in prof.events():
        if e.cpu_parent is not None or e.name in VIEWS:
            continue
        if e.name == "aten::to" and not any(c.name == "aten::_to_copy" for c in e.cpu_children):
            continue
        names.append(e.name.removeprefix("aten::"))
    return len(names), names


def layer_pieces() -> list[tuple[str, int, int, int, list[str]]]:
    """(piece, torch launches, fused launches, launches with the GEMV prologues, the torch ops)
    for one layer at batch 1."""
    gen = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(DTYPE)

    norm = RMSNormFused(HIDDEN, 1e-6)
    norm.weight = rand(HIDDEN)
    q_norm, k_norm = RMSNorm(HEAD_DIM, 1e-6), RMSNorm(HEAD_DIM, 1e-6)
    q_norm.weight, k_norm.weight = rand(HEAD_DIM), rand(HEAD_DIM)
    rotary = RotaryEmbedding(HEAD_DIM, 4096, 1e6)
    attn = AttentionLayer(0, HEADS, KV_HEADS, HEAD_DIM, rotary, q_norm, k_norm)
    x, residual = rand(1, HIDDEN), rand(1, HIDDEN)
    qkv = rand(1, (HEADS + 2 * KV_HEADS) * HEAD_DIM)
    gate_up = rand(1, 2 * INTER)
    positions = torch.tensor([100])
    pieces = [  # (name, the torch code, launches at batch 1: 0 when inside the next GEMV)
        ("input add + RMSNorm", lambda: norm.forward(x, residual), 0),
        ("q/k RMSNorm + RoPE", lambda: attn._qkv_normed_and_rotated(qkv, positions), 1),
        ("post-attention add + RMSNorm", lambda: norm.forward(x, residual), 0),
        ("SiLU-and-mul", lambda: silu_and_mul(gate_up), 0),
    ]
    rows = []
    # The torch code itself: on a CPU the registry would otherwise pick chapter 20's C++ kernels
    # (one call each, no aten ops to count). The switch is read on every call.
    with mock.patch.dict(os.environ, {"MINISGL_DISABLE_FUSED_KERNELS": "1"}):
        for name, fn, in_gemv in pieces:
            count, names = torch_launches(fn)
            rows.append((name, count, 1, in_gemv, names))
    if not all(count for _, count, *_ in rows):
        raise RuntimeError(f"a piece ran no torch op, so it was not the torch code: {rows}")
    return rows


def gpu_step_kernels() -> dict[str, int]:
    """CUDA kernels of one eager decode step of Qwen3-0.6B at batch 1, fused on and off."""
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    counts = {}
    for label, disabled in (("torch ops", "1"), ("fused kernels", "0")):
        os.environ["MINISGL_DISABLE_FUSED_KERNELS"] = disabled
        triton_impls.fused_kernels_on.cache_clear()  # the registry reads the flag once
        llm = LLM("Qwen/Qwen3-0.6B", dummy_weight=True, dtype="bfloat16", device="cuda",
                  attention_backend="triton", cuda_graph_max_bs=0, max_running_reqs=4,
                  page_size=16, num_pages=256)
        sched = llm.scheduler
        sched.add_request(list(range(1, 33)), SamplingParams(max_tokens=8, ignore_eos=True))
        sched.step()  # prefill
        sched.step()  # a first decode step: Triton compiles here
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            sched.step()
            torch.cuda.synchronize()
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        counts[label] = len(kernels)
        while sched.has_work:
            sched.step()
        llm.shutdown()
        del llm
    os.environ.pop("MINISGL_DISABLE_FUSED_KERNELS")
    triton_impls.fused_kernels_on.cache_clear()
    return counts


def main() -> int:
    print("One Qwen3-0.6B decoder layer at batch 1, bf16: kernel launches per piece")
    total_before = total_after = total_gemv = 0
    for name, before, after, in_gemv, names in layer_pieces():
        total_before += before
        total_after += after
        total_gemv += in_gemv
        print(f"  {name:30s} torch {before:2d} -> fused {after} -> with prologues {in_gemv}   "
              f"({' '.join(names)})")
    # The rest of a layer: four GEMMs (qkv, o, gate_up, down), the KV store and decode attention.
    # Unfused: chapter 19's store_kv kernel, then attention as a split kernel and a merge kernel.
    # Chapter 20's decode attention stores the step's K/V itself (new_kv).
    rest_torch, rest_fused = 4 + 1 + 2, 4 + 2
    print(f"  {'GEMMs, store_kv, attention':30s} torch {rest_torch} (4 + 1 + 2) -> fused "
          f"{rest_fused} (4 + 2: the store inside decode attention)")
    before, after = total_before + rest_torch, total_after + rest_fused
    print(f"kernels per decoder layer: torch {before} -> fused {after}"
          f"; x 28 layers: {28 * before} -> {28 * after}")
    print(f"with the GEMV prologues (norms, SiLU-and-mul inside the GEMVs): "
          f"{total_gemv + rest_fused} per decoder layer, {28 * (total_gemv + rest_fused)} for 28 "
          f"layers")
    if torch.cuda.is_available():
        counts = gpu_step_kernels()
        on, off = counts["fused kernels"], counts["torch ops"]
        print(f"GPU, one eager decode step of Qwen3-0.6B (28 layers, sampling included): "
              f"{off} CUDA kernels with torch ops, {on} with the fused kernels "
              f"({(off - on) / 28:.1f} fewer per layer)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
