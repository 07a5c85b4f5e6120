"""Chapter 17: tensor parallelism, two CPU processes joined by gloo.

Writes a tiny random Llama (8 query heads, 2 KV heads) and a tiny Qwen3 with one KV head (fewer KV
heads than ranks: each rank keeps a copy) with Hugging Face transformers, then runs one forward
pass at TP=1 in this process and at TP=2 in two spawned ranks, each holding half of every
weight, and compares the logits. It prints which weights each rank holds, and the communication of
one token through the real Qwen3-0.6B.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from minisgl.distributed import set_tp_info
from minisgl.models.config import ModelConfig
from minisgl.models.register import create_model
from minisgl.models.tp_logits import tp_logits
from minisgl.models.weight import load_model
from minisgl.utils.offline import prepare_qwen3

TINY = dict(vocab_size=321, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
            num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
            tie_word_embeddings=False)


def write_tiny(folder: Path, model_type: str, arch: str, **overrides) -> None:
    config = AutoConfig.for_model(model_type, architectures=[arch], **{**TINY, **overrides})
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.1 * torch.randn(p.shape) if "norm" in name else 0.05 * torch.randn(p.shape))
    model.save_pretrained(folder)


def show_shards(folder: Path, tp: int) -> None:
    """Each rank's weights of layer 0, built on the meta device (shapes only, no memory)."""
    config = ModelConfig.from_path(folder)
    print(f"layer 0 weights per rank at TP={tp} (whole model: {config.num_qo_heads} query heads, "
          f"{config.num_kv_heads} KV heads, vocab {config.vocab_size}):")
    for rank in range(tp):
        set_tp_info(rank, tp)
        model = create_model(config, torch.float32, "meta")
        shapes = {name: tuple(t.shape) for name, t in model.named_weights()
                  if name.startswith(("model.layers.0.self_attn.qkv", "model.layers.0.self_attn.o",
                                      "model.layers.0.mlp", "model.embed", "lm_head"))}
        print(f"  rank {rank}: " + ", ".join(f"{n.split('.')[-2]} {s}" for n, s in shapes.items()))
    set_tp_info(0, 1)


def communication(config: ModelConfig, bytes_per_value: int = 2) -> None:
    per_layer = 2 * config.hidden_size * bytes_per_value  # after o_proj and after down_proj
    total = config.num_layers * per_layer + config.hidden_size * bytes_per_value
    print(f"Qwen3-0.6B, one token, bf16: 2 all-reduces x {config.num_layers} layers x "
          f"{config.hidden_size} values + 1 for the embedding = {total / 1024:.1f} KiB summed "
          f"per token; the LM head gathers {config.vocab_size * bytes_per_value / 1024:.0f} KiB "
          "of logits per sampled token")


def main() -> None:
    start = time.perf_counter()
    ids = torch.randint(0, TINY["vocab_size"], (9,), generator=torch.Generator().manual_seed(1))
    with tempfile.TemporaryDirectory() as tmp:
        llama, qwen3 = Path(tmp) / "llama", Path(tmp) / "qwen3"
        write_tiny(llama, "llama", "LlamaForCausalLM")
        write_tiny(qwen3, "qwen3", "Qwen3ForCausalLM", num_key_value_heads=1, head_dim=16,
                   tie_word_embeddings=True)
        show_shards(llama, 2)
        cases = [("tiny Llama, 2 KV heads", llama), ("tiny Qwen3, 1 KV head", qwen3)]
        splits = tp_logits([folder for _, folder in cases], [ids.tolist()] * 2, tp=2)
        for (name, folder), split in zip(cases, splits):
            whole = load_model(folder).forward(ids, torch.arange(len(ids)))
            diff = (whole - split).abs().max().item()
            same = torch.equal(whole.argmax(-1), split.argmax(-1))
            print(f"{name}: logits TP=2 vs TP=1 max |diff| {diff:.2e} "
                  f"({'PASS' if diff <= 1e-5 and same else 'FAIL'}), same argmax: {same}")
    communication(ModelConfig.from_path(prepare_qwen3()))
    print(f"done in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
