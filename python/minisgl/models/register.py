"""Which class builds which architecture: config.json's `architectures[0]` -> model class."""

from __future__ import annotations

import torch

from minisgl.utils.misc import MinisglError

from . import llama, qwen2, qwen3  # noqa: F401  (importing them registers them in MODELS)

# isort: split
# (kept apart: qwen3_moe.py arrives in chapter 18, and the trees before it drop the line)
from . import qwen3_moe  # noqa: F401

# isort: split
from .base import MODELS, CausalLM
from .config import ModelConfig


def get_model_class(architecture: str) -> type[CausalLM]:
    try:
        return MODELS.get(architecture)
    except KeyError as e:
        raise MinisglError(e.args[0]) from None


def create_model(config: ModelConfig, dtype: torch.dtype, device: torch.device | str) -> CausalLM:
    """Build the model with uninitialised weights of the given dtype directly on the device."""
    cls = get_model_class(config.architecture)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return cls(config)
    finally:
        torch.set_default_dtype(previous)
