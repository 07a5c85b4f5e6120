"""Chapter 26: the bundled SmolLM2 with int8 weights, on the CPU.

Quantizes one weight matrix by hand to show what is stored (8-bit values and one scale per
row) and how far each weight moves; loads the model in fp32 and with quantization="int8" and
prints how many bytes their weights take; answers the same questions greedily with both and
says which tokens differ; and computes both models' perplexity on the opening of Pride and
Prejudice (tests/data).
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM
from minisgl.models.weight import load_model
from minisgl.quant.model import weight_bytes
from minisgl.quant.quantize import dequantize, quantize_int8
from minisgl.utils.hf import resolve_model

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTIONS = ["What is the capital of France?", "Write a haiku about the sea.",
             "List three prime numbers greater than 10."]
PASSAGE = Path(__file__).resolve().parent.parent / "tests" / "data" / "pride_and_prejudice.txt"


def one_matrix() -> None:
    model = load_model(resolve_model(MODEL))
    w = model.model.layers[0].mlp.down_proj.weight
    q, scale = quantize_int8(w)
    error = (dequantize(q, scale) - w).abs()
    print(f"layer 0 down_proj {tuple(w.shape)}: int8 values in [{q.min()}, {q.max()}], "
          f"{scale.numel()} fp32 scales (one per output row, {scale.min():.2e} to "
          f"{scale.max():.2e}); largest error {error.max():.2e} <= half the row's step: "
          f"{bool((error <= scale[:, None] / 2 * 1.0001).all())}")
    plain = weight_bytes(model)
    quantized = weight_bytes(load_model(resolve_model(MODEL), quantization="int8"))
    print(f"weights: fp32 {plain / 2**20:.0f} MiB, int8 {quantized / 2**20:.0f} MiB "
          f"({quantized / plain:.2f} of fp32; the tied embedding stays fp32)")


def perplexity(llm: LLM) -> float:
    ids = torch.tensor(llm.tokenizer.encode(PASSAGE.read_text(encoding="utf-8")))
    logits = llm.scheduler.engine.model.forward(ids, torch.arange(len(ids)))
    return float(torch.nn.functional.cross_entropy(logits[:-1], ids[1:]).exp())


def main() -> None:
    one_matrix()
    answers = {}
    for quantization in (None, "int8"):
        llm = LLM(MODEL, device="cpu", dtype="float32", num_pages=1024, max_seq_len=512,
                  quantization=quantization)
        prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}])
                   for q in QUESTIONS]
        start = time.perf_counter()
        out = llm.generate(prompts, SamplingParams(max_tokens=24), use_tqdm=False)
        name = quantization or "fp32"
        answers[name] = out
        print(f"{name}: {time.perf_counter() - start:.2f} s for {len(QUESTIONS)} answers; "
              f"perplexity {perplexity(llm):.3f}")
        llm.shutdown()
    for question, plain, quantized in zip(QUESTIONS, answers["fp32"], answers["int8"]):
        same = plain["token_ids"] == quantized["token_ids"]
        print(f"- {question}\n  fp32: {plain['text'].strip()!r}")
        if not same:
            print(f"  int8: {quantized['text'].strip()!r}")
        print(f"  int8 tokens equal fp32's: {same}")


if __name__ == "__main__":
    main()
