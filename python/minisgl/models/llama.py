"""Llama (and SmolLM2, which is a small Llama): the plain decoder of base.py."""

from __future__ import annotations

from .base import MODELS, CausalLM


@MODELS.register("LlamaForCausalLM")
class LlamaForCausalLM(CausalLM):
    pass
