"""Qwen2: the Llama decoder with biases on the q/k/v projection (config.attention_bias)."""

from __future__ import annotations

from .base import MODELS, CausalLM


@MODELS.register("Qwen2ForCausalLM")
class Qwen2ForCausalLM(CausalLM):
    pass
