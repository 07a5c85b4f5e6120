"""Chapter 18 on a GPU: the fused MoE layer against the torch loop, and Qwen3-30B-A3B (random bf16
weights, the real config) served by minisgl beside Hugging Face transformers in the same process.

    python benchmarks/moe_gpu.py layer    fused MoE vs torch reference, decode batches 1 and 64
    python benchmarks/moe_gpu.py model    Qwen3-30B-A3B: batch-1 decode ms/step, 64 requests of
                                          100-1024 input and output tokens; the same with HF

The 61 GB of weights fit one H200 once, not twice. So minisgl runs first with its own random
weights (drawn on the GPU); then its KV pool and CUDA graphs are freed, the weight tensors are
kept, and the HF model is built on the meta device and handed *views* of those very tensors
(q/k/v and gate/up are row slices of our merged matrices; the stacked experts have the same
layout as transformers 5's). Both engines run identical weights, held once.

HF's MoE is slow and its static batch runs every row to the longest output, so its 64-request
figure is measured on a short run and extrapolated: time(prefill + N steps) is measured for two
N and the per-step time extended to the longest output. A decode step only gets slower as the
cache grows, so this underestimates HF's time: the speedup printed is a lower bound.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import torch

from decode_latency import hf_ms_per_step, ms_per_decode_step, random_prompts
from minisgl.benchmark.offline import make_workload, run_minisgl
from minisgl.llm import LLM
from minisgl.models.config import ModelConfig
from minisgl.ops.moe import fused_moe
from minisgl.utils.hf import resolve_model

MODEL = "Qwen/Qwen3-30B-A3B"
DECODE_TARGET_MS = 4.0
OFFLINE_TARGET = 5.0
LAYER_TARGET = 3.0


def gpu_ms(fn, iters: int = 50) -> float:
    """Median GPU time of fn() in ms, after warm-up (events around each call)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def bench_layer() -> bool:
    """One Qwen3-30B-A3B MoE block (128 experts, top 8, hidden 2048, expert width 768), bf16."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    w13 = torch.randn(128, 1536, 2048, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    w2 = torch.randn(128, 2048, 768, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02
    ok = True
    for batch in (1, 64, 1024):
        x = torch.randn(batch, 2048, device="cuda", dtype=torch.bfloat16, generator=gen)
        logits = torch.randn(batch, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        ref = fused_moe(x, logits, w13, w2, 8, True, backend="torch").float()
        got = fused_moe(x, logits, w13, w2, 8, True, backend="triton").float()
        err = ((got - ref).abs().max() / ref.abs().max()).item()
        fused = gpu_ms(lambda: fused_moe(x, logits, w13, w2, 8, True, backend="triton"))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fused_moe(x, logits, w13, w2, 8, True, backend="triton")
        graphed = gpu_ms(graph.replay)
        loop = gpu_ms(lambda: fused_moe(x, logits, w13, w2, 8, True, backend="torch"), iters=10)
        active = min(128, batch * 8) * (1536 + 768) * 2048 * 2  # bytes of the experts used
        print(f"MoE layer batch {batch:4d}: fused triton {fused:7.3f} ms (in a CUDA graph "
              f"{graphed:7.3f} ms, {active / (graphed * 1e-3) / 1e12:5.2f} TB/s of expert weights), "
              f"torch loop {loop:7.3f} ms, speedup {loop / fused:5.1f}x eager / "
              f"{loop / graphed:5.1f}x graphed; max rel diff {err:.1e}", flush=True)
        ok &= err < 2e-2
        if batch == 64:
            met = loop / fused >= LAYER_TARGET
            print(f"target fused >= {LAYER_TARGET}x torch at batch 64 (eager): "
                  f"{'met' if met else 'NOT met'}", flush=True)
    return ok


def hf_views(state: dict[str, torch.Tensor], mc: ModelConfig) -> dict[str, torch.Tensor]:
    """HF Qwen3MoeForCausalLM's state dict as views of our weights (no copy)."""
    q = mc.num_qo_heads * mc.head_dim
    kv = mc.num_kv_heads * mc.head_dim
    out = {}
    for name, t in state.items():
        if name.endswith("qkv_proj.weight"):
            base = name.removesuffix("qkv_proj.weight")
            out[base + "q_proj.weight"], out[base + "k_proj.weight"], out[base + "v_proj.weight"] \
                = t[:q], t[q:q + kv], t[q + kv:]
        elif name.endswith("gate_up_proj.weight"):  # the dense MLP layers, if any
            base = name.removesuffix("gate_up_proj.weight")
            half = t.shape[0] // 2
            out[base + "gate_proj.weight"], out[base + "up_proj.weight"] = t[:half], t[half:]
        else:
            out[name] = t
    return out


def hf_sharing(state: dict[str, torch.Tensor], folder, mc: ModelConfig, device: str = "cuda"):
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        hf = AutoModelForCausalLM.from_config(config, dtype=state["lm_head.weight"].dtype)
    hf.load_state_dict(hf_views(state, mc), strict=True, assign=True)
    with torch.device(device):  # the RoPE table is a buffer, not a weight: build it for real
        hf.model.rotary_emb = type(hf.model.rotary_emb)(config=hf.config)
    hf.eval()
    left = [n for n, p in [*hf.named_parameters(), *hf.named_buffers()] if p.device.type != device]
    assert not left, f"HF tensors not on {device}: {left[:5]}"
    return hf


def hf_offline_seconds(hf, work, short: int, long: int) -> tuple[float, float]:
    """(measured seconds of prefill + `long` steps, extrapolated seconds of the whole workload)."""
    from transformers import GenerationConfig

    prompts = work.prompts
    longest = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts], device="cuda")
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts],
                        device="cuda")

    def run(steps: int) -> float:
        config = GenerationConfig(max_new_tokens=steps, do_sample=False, eos_token_id=None,
                                  pad_token_id=0)
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            hf.generate(ids, attention_mask=mask, generation_config=config)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    run(2)  # warm-up
    t_short, t_long = run(short), run(long)
    per_step = (t_long - t_short) / (long - short)
    return t_long, t_long + per_step * (max(work.output_lens) - long)


def bench_model(args) -> bool:
    folder = resolve_model(MODEL, dummy_weight=True)
    mc = ModelConfig.from_path(folder)
    start = time.perf_counter()
    llm = LLM(MODEL, dtype="bfloat16", device="cuda", dummy_weight=True, max_running_reqs=64,
              memory_ratio=0.8, page_size=16)
    torch.cuda.synchronize()
    print(f"minisgl: {MODEL} random bf16 weights on the GPU, KV pool and CUDA graphs ready in "
          f"{time.perf_counter() - start:.1f} s; {torch.cuda.memory_allocated() / 2**30:.1f} GiB "
          "allocated", flush=True)
    ms_per_decode_step(llm, random_prompts(2, 32, seed=0), steps=8)  # warm-up
    ours_ms = {bs: ms_per_decode_step(llm, random_prompts(bs, 32, seed=bs), args.steps)
               for bs in (1, 64)}
    for bs, ms in ours_ms.items():
        print(f"minisgl decode batch {bs:2d}: {ms:7.3f} ms/step", flush=True)
    work = make_workload(64, (100, 1024), (100, 1024), 10000, seed=0)
    ours_s = run_minisgl(llm, work)
    print(f"minisgl offline: 64 requests, {work.input_tokens} input and {work.output_tokens} "
          f"output tokens in {ours_s:.2f} s = {work.output_tokens / ours_s:.1f} tok/s", flush=True)

    state = llm.scheduler.engine.model.state_dict()  # keep the weights, free everything else
    llm.shutdown()
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    print(f"engine freed, weights kept: {torch.cuda.memory_allocated() / 2**30:.1f} GiB "
          "allocated", flush=True)
    hf = hf_sharing(state, folder, mc)
    impl = getattr(hf.config, "_experts_implementation", "eager")
    hf_ms = hf_ms_per_step(hf, random_prompts(1, 32, seed=1), args.hf_steps)
    print(f"transformers decode batch  1: {hf_ms:7.3f} ms/step (experts implementation {impl})",
          flush=True)
    measured, estimate = hf_offline_seconds(hf, work, short=4, long=args.hf_offline_steps)
    print(f"transformers offline: prefill + {args.hf_offline_steps} steps of the 64 requests "
          f"took {measured:.2f} s; extrapolated to {max(work.output_lens)} steps: "
          f"{estimate:.1f} s = {work.output_tokens / estimate:.1f} tok/s (a lower bound on HF's "
          "time)", flush=True)
    speedup = estimate / ours_s
    print(f"batch 1 decode: minisgl {ours_ms[1]:.3f} ms/step, transformers {hf_ms:.3f} ms/step "
          f"({hf_ms / ours_ms[1]:.1f}x)")
    print(f"target <= {DECODE_TARGET_MS} ms/step at batch 1: "
          f"{'met' if ours_ms[1] <= DECODE_TARGET_MS else 'NOT met'} ({ours_ms[1]:.3f} ms)")
    print(f"offline speedup over transformers: {speedup:.2f}x (target >= {OFFLINE_TARGET}x: "
          f"{'met' if speedup >= OFFLINE_TARGET else 'NOT met'})")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["layer", "model"])
    parser.add_argument("--steps", type=int, default=100, help="minisgl decode steps timed")
    parser.add_argument("--hf-steps", type=int, default=16, help="HF batch-1 decode steps timed")
    parser.add_argument("--hf-offline-steps", type=int, default=24,
                        help="HF decode steps of the 64-request run actually measured")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    ok = bench_layer() if args.what == "layer" else bench_model(args)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
