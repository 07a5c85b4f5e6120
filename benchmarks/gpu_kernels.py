"""Everything chapter 19 needs from a GPU, in one run: build the extension, check it byte for
byte against torch_ops, check the engine's greedy tokens with and without it, and time both.

    python benchmarks/gpu_kernels.py [--model DIR]

Prints one line per check or timing; exits 1 if any check fails. Timings use CUDA events after
a warm-up, the median of many runs; bandwidth counts bytes read plus bytes written.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from minisgl import kernel
from minisgl.kernel import cuda_ext, torch_ops

FAILED: list[str] = []


def check(name: str, ok: bool) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}")
    if not ok:
        FAILED.append(name)


def median_us(fn, iters: int = 100, warmup: int = 20, repeat: int = 10) -> float:
    """Median over `iters` samples of the time per call of `repeat` back-to-back calls: the queue
    stays full, so the CPU-side launch cost of a Python call is not counted as GPU time."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / repeat)
    return statistics.median(times)


def graph_us(fn, iters: int = 200) -> float:
    """Median time of one replay of a CUDA graph that holds 20 calls of fn, per call."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            fn()
    return median_us(graph.replay, iters, repeat=1) / 20


def random_bits(shape, dtype):
    """Random bit patterns (NaNs and infs included): a copy must preserve every byte."""
    raw = torch.randint(-2**15, 2**15, (*shape[:-1], shape[-1] * dtype.itemsize // 2),
                        dtype=torch.int16, device="cuda")
    return raw.view(dtype)


def check_store(dtype, slots, n, row, offset=0):
    k_cache = random_bits((slots, row + offset), dtype)[:, offset:]  # offset: unaligned rows
    v_cache = random_bits((slots, row + offset), dtype)[:, offset:]
    # as in the model: k a fresh tensor (after RoPE), v a strided view into the fused qkv
    k = random_bits((n, row), dtype)
    v = random_bits((n, 3 * row), dtype)[:, 2 * row :]
    idx = torch.randperm(slots, device="cuda")[:n].int()
    ref_k, ref_v = k_cache.clone(), v_cache.clone()
    torch_ops.store_cache(ref_k, ref_v, idx.long(), k, v)
    kernel.store_cache(k_cache, v_cache, idx, k, v)
    same = torch.equal(k_cache.view(torch.int16), ref_k.view(torch.int16)) and \
        torch.equal(v_cache.view(torch.int16), ref_v.view(torch.int16))
    check(f"store_kv {dtype} rows={row} offset={offset}: equal to torch_ops", same)


def check_indexing(dtype, vocab, start, length, n, hidden):
    weight = random_bits((length, hidden), dtype)
    ids = torch.randint(0, vocab, (n,), device="cuda")
    got = kernel.indexing(weight, ids, start, length)
    ref = torch_ops.indexing(weight, ids, start, length)
    check(f"indexing {dtype} hidden={hidden} shard=[{start},{start + length}) of {vocab}: "
          "equal to torch_ops", torch.equal(got.view(torch.int16), ref.view(torch.int16)))


def report_time(label: str, n: int, fn, moved_bytes: int) -> None:
    if n >= 4096:  # large: bandwidth
        us = median_us(fn)
        print(f"time {label:26s} {n:6d} tokens: {us:8.1f} us  {moved_bytes / us / 1e6:6.2f} TB/s")
    else:  # small: what a decode step pays, launch overhead removed by a CUDA graph
        print(f"time {label:26s} {n:6d} tokens in a CUDA graph: {graph_us(fn):6.2f} us")


def time_store(n: int) -> None:
    row = 8 * 128  # Qwen3-0.6B: 8 KV heads x 128, bf16 = 2 KB rows
    k_cache = torch.randn(n * 2, row, device="cuda", dtype=torch.bfloat16)
    v_cache = torch.randn_like(k_cache)
    k, v = torch.randn_like(k_cache[:n]), torch.randn_like(k_cache[:n])
    idx = torch.randperm(n * 2, device="cuda")[:n].int()
    idx64 = idx.long()
    moved = 4 * n * row * 2  # read k and v, write two cache rows

    def index_put() -> None:
        k_cache[idx64] = k
        v_cache[idx64] = v

    report_time("store_kv (ours)", n, lambda: kernel.store_cache(k_cache, v_cache, idx, k, v),
                moved)
    report_time("index_copy_ (torch_ops)", n,
                lambda: torch_ops.store_cache(k_cache, v_cache, idx64, k, v), moved)
    report_time("k_cache[idx] = k", n, index_put, moved)


def time_indexing(n: int) -> None:
    vocab, hidden = 151936, 1024
    weight = torch.randn(vocab, hidden, device="cuda", dtype=torch.bfloat16)
    ids = torch.randint(0, vocab, (n,), device="cuda")
    ids32 = ids.int()
    moved = 2 * n * hidden * 2
    report_time("indexing (ours)", n, lambda: kernel.indexing(weight, ids32), moved)
    report_time("torch.embedding", n, lambda: torch.embedding(weight, ids), moved)


def time_copy() -> None:
    x = torch.empty(1 << 28, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    us = median_us(lambda: y.copy_(x), iters=20)
    print(f"time device copy 256 MiB: {us:8.1f} us  {2 * x.numel() / us / 1e6:6.2f} TB/s")


def engine_tokens(model: str) -> list[list[int]]:
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    prompts = [[(i * 7919 + j * 104729) % 150000 for j in range(20 + 13 * i)] for i in range(8)]
    llm = LLM(model, dtype="bfloat16", device="cuda", dummy_weight=True, page_size=16,
              num_pages=4096, seed=0)
    out = llm.generate(prompts, SamplingParams(max_tokens=32, ignore_eos=True), use_tqdm=False)
    llm.shutdown()
    return [r["token_ids"] for r in out]


def check_hf_parity() -> None:
    """The engine on the GPU (fp32) against HF greedy on identical random Qwen3 weights."""
    import tempfile

    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3Config

    from minisgl.core import SamplingParams
    from minisgl.llm import LLM
    from minisgl.tokenizer import load_tokenizer
    from minisgl.utils.hf import resolve_model

    qwen = resolve_model("Qwen/Qwen3-0.6B", dummy_weight=True)
    config = Qwen3Config.from_pretrained(qwen, num_hidden_layers=4,
                                         layer_types=["full_attention"] * 4)
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(config, dtype=torch.float32).cuda().eval()
    with torch.no_grad():  # a large embedding scale makes the logits peaked, as in a real model,
        for name, p in hf.named_parameters():  # so rounding noise cannot flip an argmax
            scale = 0.5 if "embed" in name else 0.05
            p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name else scale * torch.randn_like(p))
    folder = tempfile.mkdtemp()
    hf.save_pretrained(folder)
    load_tokenizer(qwen).hf.save_pretrained(folder)
    prompts = [[(i * 31 + j * 17) % 150000 for j in range(10 + 9 * i)] for i in range(6)]
    expected = []
    greedy = GenerationConfig(max_new_tokens=16, do_sample=False, eos_token_id=None,
                              pad_token_id=0)  # never stop early, as ignore_eos
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device="cuda")  # explicit mask: token 0 is also the pad id
            out = hf.generate(ids, attention_mask=torch.ones_like(ids), generation_config=greedy)
            expected.append(out[0, len(p):].tolist())
    llm = LLM(folder, dtype="float32", device="cuda", page_size=16, num_pages=1024)
    got = [r["token_ids"] for r in llm.generate(
        prompts, SamplingParams(max_tokens=16, ignore_eos=True), use_tqdm=False)]
    llm.shutdown()
    same = sum(g == e for g, e in zip(got, expected))
    check(f"engine on cuda (fp32, 4-layer Qwen3, random weights): greedy tokens == HF for "
          f"{same}/{len(prompts)} prompts", got == expected)


def check_engine(model: str) -> None:
    """The same greedy generation in two fresh processes, with and without the extension."""
    runs = {}
    for disable in ("0", "1"):
        env = {**os.environ, "MINISGL_DISABLE_CUDA_EXT": disable}
        proc = subprocess.run([sys.executable, __file__, "--model", model, "--engine-tokens"],
                              env=env, capture_output=True, text=True, check=True)
        runs[disable] = json.loads(proc.stdout.strip().splitlines()[-1])
    tokens = sum(map(len, runs["0"]))
    check(f"engine greedy tokens ({tokens}, Qwen3 architecture, dummy bf16 weights): "
          "CUDA kernels == torch_ops", runs["0"] == runs["1"])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="Qwen/Qwen3-0.6B")
    parser.add_argument("--engine-tokens", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine_tokens:
        print(json.dumps(engine_tokens(args.model)))
        return 0
    start = time.perf_counter()
    ext = cuda_ext.load_extension()
    check(f"extension built and loaded in {time.perf_counter() - start:.1f} s", ext is not None)
    if ext is None:
        return 1
    torch.manual_seed(0)
    for dtype in (torch.bfloat16, torch.float32):
        check_store(dtype, 300, 37, 8 * 128)  # aligned: uint4 path
        check_store(dtype, 64, 17, 3)  # 6 or 12 bytes per row: 2- or 4-byte path
        check_store(dtype, 64, 17, 64, offset=1)  # rows start off 16-byte boundaries
        check_indexing(dtype, 151936, 0, 151936, 1000, 1024)
        check_indexing(dtype, 151936, 75968, 75968, 1000, 1024)  # a two-way vocabulary shard
        check_indexing(dtype, 49152, 0, 49152, 77, 576)
        check_indexing(dtype, 32000, 8000, 8000, 99, 4096)  # long rows: split across warps
    check_engine(args.model)
    time_copy()
    for n in (65536, 64):
        time_store(n)
        time_indexing(n)
    check_hf_parity()
    print("all checks passed" if not FAILED else f"{len(FAILED)} checks FAILED")
    return 0 if not FAILED else 1


if __name__ == "__main__":
    sys.exit(main())
