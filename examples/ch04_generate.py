"""Chapter 4: tokenizer + model + sampler = a chat answer, by naive generation (no KV cache)."""

from __future__ import annotations

import time

from minisgl.core import SamplingParams
from minisgl.engine.naive import naive_generate
from minisgl.models.weight import load_model
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model
from minisgl.utils.misc import run_main

QUESTION = "What is the capital of France?"


def main() -> None:
    path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    model, tokenizer = load_model(path), load_tokenizer(path)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": QUESTION}])
    print(f"prompt: {len(prompt)} tokens through the chat template")
    start = time.perf_counter()
    tokens = naive_generate(model, prompt, SamplingParams(max_tokens=32),
                            eos_token_ids=tokenizer.eos_token_ids)
    elapsed = time.perf_counter() - start
    print(f"Q: {QUESTION}")
    print(f"A: {tokenizer.decode(tokens, skip_special_tokens=True)}")
    print(f"{len(tokens)} tokens in {elapsed:.1f} s (greedy, whole sequence recomputed each step)")

    detok = tokenizer.detokenizer()
    pieces = [detok.feed(t) for t in tokens] + [detok.finish()]
    print("streamed pieces:", [p for p in pieces if p][:8], "...")


if __name__ == "__main__":
    began = time.perf_counter()
    run_main(main)
    print(f"took {time.perf_counter() - began:.1f} s")
