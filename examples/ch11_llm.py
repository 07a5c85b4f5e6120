"""Chapter 11: the offline API. One call generates answers for a batch of chat prompts."""

from __future__ import annotations

import time

import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM

QUESTIONS = ["What is the capital of France?", "Write a haiku about rain.",
             "What is 12 times 12?", "Who painted the Mona Lisa?"]


def main() -> None:
    # Decoding 4 requests of a 135M model runs matrix products far too small to gain from
    # torch's intra-op threads, and on a busy 2-core machine those threads spin against the
    # other processes: this main took 72 s there (7x the CPU time it needs); one thread does the
    # same work in about a fifth of the wall time.
    torch.set_num_threads(1)
    llm = LLM("HuggingFaceTB/SmolLM2-135M-Instruct")
    prompts = [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}])
               for q in QUESTIONS]
    results = llm.generate(prompts, SamplingParams(max_tokens=32))
    for q, r in zip(QUESTIONS, results):
        print(f"Q: {q}\nA: {r['text']!r} ({len(r['token_ids'])} tokens, {r['finish_reason']})")
    sampled = llm.generate([prompts[1]] * 2, SamplingParams(temperature=0.8, top_p=0.95,
                                                            max_tokens=24), use_tqdm=False)
    print("two samples at temperature 0.8:", [r["text"] for r in sampled])
    llm.shutdown()


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
