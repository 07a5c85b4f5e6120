"""Chapter 2: the layers of a decoder, each checked against Hugging Face's own module."""

from __future__ import annotations

import time

import torch
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as hf

from minisgl import ops
from minisgl.layers import RMSNorm, RotaryEmbedding
from minisgl.models.config import ModelConfig


def main() -> None:
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=576, intermediate_size=1536, num_attention_heads=9,
                      num_key_value_heads=3, architectures=["LlamaForCausalLM"],
                      rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
    x = torch.randn(8, cfg.hidden_size)

    norm, ref_norm = RMSNorm(cfg.hidden_size, 1e-5), hf.LlamaRMSNorm(cfg.hidden_size, eps=1e-5)
    norm.weight = 1 + 0.1 * torch.randn(cfg.hidden_size)
    ref_norm.weight.data.copy_(norm.weight)
    with torch.no_grad():
        print(f"RMSNorm      max |diff| vs HF: {(norm.forward(x) - ref_norm(x)).abs().max():.2e}")

    mlp = hf.LlamaMLP(cfg)
    gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
    ours = ops.silu_and_mul(x @ gate_up.T) @ mlp.down_proj.weight.detach().T
    with torch.no_grad():
        print(f"SiLU-and-mul max |diff| vs HF: {(ours - mlp(x)).abs().max():.2e}")

    mc = ModelConfig.from_dict(cfg.to_dict())
    rope, ref_rope = RotaryEmbedding(mc.head_dim, 2048, mc.rope_theta), hf.LlamaRotaryEmbedding(cfg)
    pos = torch.randint(0, 2048, (8,))
    q, k = torch.randn(8, 9, mc.head_dim), torch.randn(8, 3, mc.head_dim)
    cos, sin = ref_rope(q, pos[None])
    q_ref, _ = hf.apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
    q_out, _ = rope.forward(pos, q, k)
    print(f"RoPE         max |diff| vs HF: {(q_out - q_ref[0].transpose(0, 1)).abs().max():.2e}")


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
