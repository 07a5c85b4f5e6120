"""Chapters 15 and 20 on a GPU: Triton attention replayed from CUDA graphs gives what the torch
backend and Hugging Face transformers give.

    python benchmarks/gpu_attention_parity.py

1. A 4-layer Qwen3 with random fp32 weights: greedy tokens of `--attn triton` with CUDA graphs ==
   `--attn torch` (eager) == HF transformers generate, on ten prompts whose requests stop at
   different lengths, so the decode batch shrinks through padded and exact graph sizes.
2. Qwen3-0.6B with random bf16 weights (`--dummy-weight`): the logits of one decode step of a
   padded batch, replayed from a CUDA graph with Triton attention, against the same step run
   eagerly with the torch backend on the same KV cache.

Prints one line per check; exits 1 if any fails.
"""

from __future__ import annotations

import sys
import tempfile

import torch
import transformers

from minisgl.attention import create_attn_backend
from minisgl.core import Context, SamplingParams, set_global_ctx
from minisgl.engine.engine import ForwardOutput
from minisgl.engine.graph import padded_size
from minisgl.llm import LLM
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model

DEVICE = "cuda"
FAILED: list[str] = []
MAX_TOKENS = [16, 12, 9, 16, 5, 14, 7, 16, 3, 11]  # per request: the batch shrinks as they stop
BF16_PROMPT_LENS = (40, 300, 7, 1000, 123)  # a decode batch of 5 runs in the graph of 8


def check(name: str, ok: bool) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)
    if not ok:
        FAILED.append(name)


def count_replays(llm: LLM) -> list[int]:
    """The size of every batch the engine replays from a CUDA graph from now on."""
    runner = llm.scheduler.engine.graph_runner
    sizes: list[int] = []
    replay = runner.replay

    def counted(batch):
        sizes.append(batch.size)
        return replay(batch)

    runner.replay = counted
    return sizes


def random_qwen3_folder(layers: int) -> str:
    """HF's Qwen3 with the 0.6B shapes, `layers` layers and random fp32 weights, saved with the
    tokenizer. A large embedding scale makes the logits peaked, as in a trained model, so that
    rounding differences between attention kernels cannot flip a greedy choice."""
    from transformers import AutoModelForCausalLM, Qwen3Config

    qwen = resolve_model("Qwen/Qwen3-0.6B", dummy_weight=True)
    config = Qwen3Config.from_pretrained(qwen, num_hidden_layers=layers,
                                         layer_types=["full_attention"] * layers)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn_like(p)
            p.copy_(1 + 0.1 * noise if "norm" in name else (0.5 if "embed" in name else 0.05) * noise)
    folder = tempfile.mkdtemp(prefix="qwen3-4l-")
    model.save_pretrained(folder)
    load_tokenizer(qwen).hf.save_pretrained(folder)
    return folder


def hf_greedy(folder: str, prompts: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to(DEVICE).eval()
    greedy = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=None,
                              pad_token_id=0)  # never stop early, as ignore_eos
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p], device=DEVICE)  # an explicit mask: token 0 is also the pad id
            tokens = model.generate(ids, attention_mask=torch.ones_like(ids),
                                    generation_config=greedy)
            out.append(tokens[0, len(p):].tolist())
    return out


def check_fp32_tokens() -> None:
    folder = random_qwen3_folder(layers=4)
    gen = torch.Generator().manual_seed(15)
    prompts = [torch.randint(1, 150000, (int(n),), generator=gen).tolist()
               for n in torch.randint(8, 60, (len(MAX_TOKENS),), generator=gen)]
    expected = [t[:n] for t, n in zip(hf_greedy(folder, prompts, max(MAX_TOKENS)), MAX_TOKENS)]
    params = [SamplingParams(max_tokens=n, ignore_eos=True) for n in MAX_TOKENS]
    for attn in ("torch", "triton"):
        llm = LLM(folder, dtype="float32", device=DEVICE, attention_backend=attn, page_size=16,
                  num_pages=1024, max_running_reqs=16)
        replays = count_replays(llm)
        got = [r["token_ids"] for r in llm.generate(prompts, params, use_tqdm=False)]
        decode_steps = llm.scheduler.stats().decode_batches
        sizes = llm.scheduler.engine.graph_runner.sizes
        llm.scheduler.check_integrity()
        llm.shutdown()
        same = sum(g == e for g, e in zip(got, expected))
        how = (f"CUDA graphs {sizes}: {len(replays)} of {decode_steps} decode steps replayed, "
               f"batch sizes {sorted(set(replays))}" if attn == "triton" else "eager")
        check(f"fp32 4-layer Qwen3, --attn {attn} ({how}): greedy tokens == HF for "
              f"{same}/{len(prompts)} prompts", got == expected)
        if attn == "triton":
            check("every decode step ran from a CUDA graph", len(replays) == decode_steps > 0)


def check_bf16_logits() -> None:
    llm = LLM("Qwen/Qwen3-0.6B", dtype="bfloat16", device=DEVICE, dummy_weight=True,
              attention_backend="triton", page_size=16, num_pages=2048, max_running_reqs=32)
    engine = llm.scheduler.engine
    mc = engine.model_config
    reference = Context(attn_backend=create_attn_backend(
        "torch", engine.kv_cache, engine.page_table, mc.num_qo_heads, mc.num_kv_heads))
    eager_forward = engine.forward_batch
    compared = []

    def compare_once(batch):
        if batch.is_prefill or compared:
            return eager_forward(batch)
        pool = engine.kv_cache._buffer
        before = pool.clone()
        graph_logits = engine.graph_runner.replay(batch).clone()
        pool.copy_(before)  # the reference stores this step's K/V itself
        set_global_ctx(reference)
        reference.attn_backend.prepare_metadata(batch)
        with torch.inference_mode(), reference.forward_batch(batch):
            ref_logits = engine.model.forward(batch.input_ids, batch.positions)
        set_global_ctx(engine.ctx)
        compared.append((batch.size, graph_logits, ref_logits))
        tokens = ref_logits.argmax(dim=-1)
        return ForwardOutput(tokens, tokens.cpu(), None)

    engine.forward_batch = compare_once
    gen = torch.Generator().manual_seed(20)
    prompts = [torch.randint(1, 150000, (n,), generator=gen).tolist()
               for n in BF16_PROMPT_LENS]
    llm.generate(prompts, SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    llm.shutdown()
    size, got, ref = compared[0]
    diff = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    # bf16 keeps 8 significant bits (relative step 2^-8 = 0.4%); 28 layers whose attention sums in
    # a different order drift by a few such steps, so allow 3% of the largest logit.
    tol = 0.03 * scale
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    graph = padded_size(engine.graph_runner.sizes, size)
    check(f"bf16 Qwen3-0.6B, one decode step of {size} requests (graph of {graph}): triton + "
          f"CUDA graph vs torch eager logits max |diff| {diff:.3e} "
          f"(tolerance {tol:.3e} = 3% of max |logit| {scale:.2f}); same argmax for "
          f"{agree:.0%} of rows", diff <= tol)


def main() -> int:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}", flush=True)
    check_fp32_tokens()
    check_bf16_logits()
    print("all checks passed" if not FAILED else f"{len(FAILED)} checks FAILED")
    return 0 if not FAILED else 1


if __name__ == "__main__":
    sys.exit(main())
