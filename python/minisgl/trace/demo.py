"""The CPU workload of chapters 21-23's mains and tests: 8 chat prompts on the bundled SmolLM2,
half greedy and half sampled with top-k / top-p (so the sampling op runs too)."""

from __future__ import annotations

from typing import Any

from minisgl.core import SamplingParams

QUESTIONS = [
    "What is the capital of France?",
    "Name three colors.",
    "What is 2 + 2?",
    "Say hello in Spanish.",
    "What do bees make?",
    "Give me a word that rhymes with cat.",
    "Which planet is the largest?",
    "How many legs does a spider have?",
]


def chat_prompts(llm: Any, questions: list[str] = QUESTIONS) -> list[list[int]]:
    """Each question as one user turn through the model's chat template (token ids)."""
    return [llm.tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q in questions]


def mixed_params(n: int, max_tokens: int) -> list[SamplingParams]:
    """Even rows greedy, odd rows sampled (seeded, so runs repeat)."""
    return [SamplingParams(max_tokens=max_tokens) if i % 2 == 0 else
            SamplingParams(max_tokens=max_tokens, temperature=0.8, top_k=40, top_p=0.9, seed=i)
            for i in range(n)]
