"""Chapter 4: naive generation gives exactly Hugging Face's greedy tokens on the bundled model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from minisgl.core import SamplingParams
from minisgl.engine.naive import naive_generate
from minisgl.engine.sample import Sampler
from minisgl.models.weight import load_model

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers greater than 10.",
    "Explain in one sentence what a GPU is.",
]


@pytest.fixture(scope="module")
def models(smollm2_dir):
    hf_model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    return hf_model, load_model(smollm2_dir), tokenizer


def _chat_ids(tokenizer, prompt: str) -> list[int]:
    ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                        add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_32_tokens_equal_hf_generate(models, prompt):
    hf_model, ours, tokenizer = models
    ids = _chat_ids(tokenizer, prompt)
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False)
    expected = out[0, len(ids):].tolist()
    got = naive_generate(ours, ids, SamplingParams(max_tokens=32),
                         eos_token_ids=(tokenizer.eos_token_id,))
    assert got == expected


def test_answer_mentions_paris(models):
    _, ours, tokenizer = models
    ids = _chat_ids(tokenizer, PROMPTS[0])
    tokens = naive_generate(ours, ids, SamplingParams(max_tokens=20),
                            eos_token_ids=(tokenizer.eos_token_id,))
    assert "Paris" in tokenizer.decode(tokens, skip_special_tokens=True)


def test_sampling_with_a_seed_is_reproducible_and_ignore_eos_runs_to_max(models):
    _, ours, tokenizer = models
    ids = _chat_ids(tokenizer, PROMPTS[1])
    params = SamplingParams(temperature=0.9, top_p=0.9, max_tokens=6, ignore_eos=True)
    a = naive_generate(ours, ids, params, Sampler(seed=5), eos_token_ids=(tokenizer.eos_token_id,))
    b = naive_generate(ours, ids, params, Sampler(seed=5), eos_token_ids=(tokenizer.eos_token_id,))
    assert a == b and len(a) == 6


def test_prompt_past_the_context_is_refused(models):
    _, ours, _ = models
    with pytest.raises(ValueError, match="exceeds the model's context"):
        naive_generate(ours, [1] * 10, SamplingParams(max_tokens=ours.config.max_position_embeddings))
    with pytest.raises(ValueError, match="empty"):
        naive_generate(ours, [], SamplingParams(max_tokens=1))
