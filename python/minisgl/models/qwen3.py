"""Qwen3: the Llama decoder with RMSNorm on q and k of each head before RoPE
(config.use_qk_norm), no q/k/v biases."""

from __future__ import annotations

from .base import MODELS, CausalLM


@MODELS.register("Qwen3ForCausalLM")
class Qwen3ForCausalLM(CausalLM):
    pass
