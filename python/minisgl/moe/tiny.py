"""A tiny random Qwen3-MoE model folder, for CPU tests and the chapter-18 main.

Hugging Face transformers builds `Qwen3MoeForCausalLM` from a small config, every weight gets a
fresh random value (the router too: HF starts it at zero, which would send every token to the same
experts), and save_pretrained writes it in the hub's layout, one matrix per expert. Both our loader
and HF then read the very same file. With `tokenizer=True` the folder also gets the Qwen3
tokenizer and the real vocabulary size, so `python -m minisgl --model FOLDER` can serve it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch

from minisgl.utils.offline import prepare_qwen3

TINY_MOE = dict(
    vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, moe_intermediate_size=32,
    num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=2048,
    tie_word_embeddings=False, rope_theta=1e6,
)  # fmt: skip
QWEN3_VOCAB = 151936


def write_tiny_qwen3_moe(folder: str | Path, seed: int = 0, tokenizer: bool = False,
                         **overrides: Any):
    """Save a random tiny Qwen3-MoE to `folder` (fp32); returns the HF model (eval mode)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    fields = {**TINY_MOE, **({"vocab_size": QWEN3_VOCAB} if tokenizer else {}), **overrides}
    config = Qwen3MoeConfig(architectures=["Qwen3MoeForCausalLM"], **fields)
    if tokenizer:
        config.bos_token_id, config.eos_token_id = 151643, 151645
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.1 * noise)
    model.save_pretrained(folder)
    if tokenizer:
        qwen3 = prepare_qwen3()
        for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
            shutil.copy(qwen3 / name, Path(folder) / name)
    return model
