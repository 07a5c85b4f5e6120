"""The decoder-only transformer that Llama, Qwen2 and Qwen3 share.

The three differ in small switches that ModelConfig carries: Qwen2 adds biases to the q/k/v
projection, Qwen3 normalises q and k per head before RoPE. Everything else (pre-norm layers,
grouped-query attention, a SiLU-gated MLP, RoPE) is the same, so it is written once here and each
architecture file only registers its name. Weight names match Hugging Face checkpoints, except that
q/k/v and gate/up are merged (see weight.py).

Tokens are flattened: input_ids and positions are 1-D over all tokens of the step.
"""

from __future__ import annotations

import torch

from minisgl import ops
from minisgl.layers import (
    AttentionLayer,
    BaseOP,
    LinearColParallelMerged,
    LinearQKVMerged,
    LinearRowParallel,
    OPList,
    ParallelLMHead,
    RMSNorm,
    RMSNormFused,
    RotaryEmbedding,
    VocabParallelEmbedding,
)
from minisgl.layers.moe import SparseMoeBlock
from minisgl.utils.registry import Registry

from .config import ModelConfig


class SelfAttention(BaseOP):
    def __init__(self, layer_id: int, config: ModelConfig, rotary: RotaryEmbedding) -> None:
        c = config
        self.qkv_proj = LinearQKVMerged(c.hidden_size, c.head_dim, c.num_qo_heads, c.num_kv_heads,
                                        bias=c.attention_bias)
        norms = (RMSNorm(c.head_dim, c.rms_norm_eps), RMSNorm(c.head_dim, c.rms_norm_eps))
        # With tensor parallelism this rank attends with its own heads only (qkv_proj knows them).
        self.attn = AttentionLayer(layer_id, self.qkv_proj.num_qo_heads,
                                   self.qkv_proj.num_kv_heads, c.head_dim, rotary,
                                   *(norms if c.use_qk_norm else (None, None)))
        self.o_proj = LinearRowParallel(c.num_qo_heads * c.head_dim, c.hidden_size)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return self.o_proj.forward(self.attn.forward(self.qkv_proj.forward(x), positions))

    def named_weights(self, prefix: str = ""):
        # Hugging Face keeps q_norm/k_norm directly under self_attn, not under an "attn" child.
        for name, tensor in super().named_weights(prefix):
            yield name.replace(f"{prefix}attn.", prefix), tensor


class MLP(BaseOP):
    def __init__(self, config: ModelConfig) -> None:
        if config.hidden_act != "silu":
            raise ValueError(f"hidden_act {config.hidden_act!r} is not supported (only silu)")
        inter = config.intermediate_size
        self.gate_up_proj = LinearColParallelMerged(config.hidden_size, [inter, inter])
        self.down_proj = LinearRowParallel(inter, config.hidden_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj.forward(ops.silu_and_mul(self.gate_up_proj.forward(x)))


def moe_block(config: ModelConfig) -> SparseMoeBlock:
    """The sparse MoE block of a Qwen3-MoE layer (chapter 18), sized by the config's MoE fields."""
    moe = config.moe
    assert moe is not None, "a MoE block needs the config's MoE fields"
    if config.hidden_act != "silu":
        raise ValueError(f"hidden_act {config.hidden_act!r} is not supported (only silu)")
    return SparseMoeBlock(config.hidden_size, moe.num_experts, moe.moe_intermediate_size,
                          moe.num_experts_per_tok, moe.norm_topk_prob)


class DecoderLayer(BaseOP):
    def __init__(self, layer_id: int, config: ModelConfig, rotary: RotaryEmbedding) -> None:
        eps = config.rms_norm_eps
        self.input_layernorm = RMSNormFused(config.hidden_size, eps)
        self.self_attn = SelfAttention(layer_id, config, rotary)
        self.post_attention_layernorm = RMSNormFused(config.hidden_size, eps)
        self.mlp = moe_block(config) if config.is_moe_layer(layer_id) else MLP(config)

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None, positions: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        x, residual = self.input_layernorm.forward(x, residual)
        x = self.self_attn.forward(x, positions)
        x, residual = self.post_attention_layernorm.forward(x, residual)
        return self.mlp.forward(x), residual


class DecoderModel(BaseOP):
    def __init__(self, config: ModelConfig) -> None:
        rotary = RotaryEmbedding(config.head_dim, config.max_position_embeddings,
                                 config.rope_theta, config.rope_scaling)
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size)
        self.layers = OPList([DecoderLayer(i, config, rotary) for i in range(config.num_layers)])
        self.norm = RMSNormFused(config.hidden_size, config.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        x, residual = self.embed_tokens.forward(input_ids), None
        for layer in self.layers:
            x, residual = layer.forward(x, residual, positions)
        return self.norm.forward(x, residual)[0]


class CausalLM(BaseOP):
    """The language model: a decoder plus the LM head. Subclasses only name the architecture."""

    def __init__(self, config: ModelConfig) -> None:
        self.config = config
        self.model = DecoderModel(config)
        tied = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.vocab_size, config.hidden_size, tied_to=tied)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                output_indices: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for the tokens at output_indices (all tokens when None), in fp32.

        Generation only needs the last token of each sequence, and the LM head is the largest
        matrix multiply of a small model, so it is applied only where asked.
        """
        hidden = self.model.forward(input_ids, positions)
        if output_indices is not None:
            hidden = hidden[output_indices]
        return self.lm_head.forward(hidden).float()


# config.json's `architectures[0]` -> the CausalLM subclass that builds it. It lives here, below the
# architecture files, so that they can register themselves and register.py can import them all.
MODELS: Registry[type[CausalLM]] = Registry("model architecture")
