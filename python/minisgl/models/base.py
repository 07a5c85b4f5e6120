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


def norm_then_linear(norm: RMSNormFused, proj: LinearQKVMerged | LinearColParallelMerged,
                     x: torch.Tensor, residual: torch.Tensor | None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(proj(norm(x, residual)[0]), the new residual) as one op (ops/fused_linear.py), which a
    batch-1 decode step on a GPU runs in one kernel. proj is column-parallel (qkv_proj,
    gate_up_proj): its input is the whole row on every rank, so each rank normalises the row
    itself and no communication is needed."""
    # >>> ch26
    if proj.quant is not None:  # an 8-bit weight (chapter 26): the same pair, its scheme's op
        return proj.quant.norm_linear(x, residual, norm.weight, norm.eps, proj.weight,
                                      proj.weight_scale, proj.bias)
    # <<< ch26
    return ops.fused_add_rms_norm_linear(x, residual, norm.weight, norm.eps, proj.weight,
                                         proj.bias)


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

    def forward_qkv(self, qkv: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The block after the q/k/v projection, which DecoderLayer computes together with the
        RMSNorm before it: attention, then o_proj."""
        return self.o_proj.forward(self.attn.forward(qkv, positions))

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

    def forward_after_norm(self, norm: RMSNormFused, x: torch.Tensor, residual: torch.Tensor
                           ) -> tuple[torch.Tensor, torch.Tensor]:
        """(the MLP of norm(x + residual), x + residual) in two ops: the norm with gate_up_proj,
        SiLU-and-mul with down_proj."""
        gate_up, residual = norm_then_linear(norm, self.gate_up_proj, x, residual)
        return self.down_proj.forward_silu_and_mul(gate_up), residual


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
        """Each RMSNorm goes into one op with the projection that reads it, and SiLU-and-mul with
        down_proj: for one token on a GPU (a batch-1 decode step, bound by its number of kernels)
        each pair is one GEMV, three launches fewer per layer with the same rounding; otherwise
        the plain ops run, in the same order as before chapter 20."""
        attn = self.self_attn
        qkv, residual = norm_then_linear(self.input_layernorm, attn.qkv_proj, x, residual)
        x = attn.forward_qkv(qkv, positions)
        if isinstance(self.mlp, MLP):
            return self.mlp.forward_after_norm(self.post_attention_layernorm, x, residual)
        # A MoE block (chapter 18) reads the normalised row twice, in its router and in its
        # experts: the norm stays an op of its own
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
                output_indices: torch.Tensor | None = None, *, upcast: bool = True
                ) -> torch.Tensor:
        """Logits for the tokens at output_indices (all tokens when None), in fp32, or with
        upcast=False in the LM head's dtype: the same values, since the LM head rounds its fp32
        sums to that dtype either way, in half the bytes for a bf16 model (a CUDA graph's static
        logits at batch 256 are 78 MB in bf16; chapter 15).

        Generation only needs the last token of each sequence, and the LM head is the largest
        matrix multiply of a small model, so it is applied only where asked.
        """
        hidden = self.model.forward(input_ids, positions)
        if output_indices is not None:
            hidden = hidden[output_indices]
        logits = self.lm_head.forward(hidden)
        return logits.float() if upcast else logits


# config.json's `architectures[0]` -> the CausalLM subclass that builds it. It lives here, below the
# architecture files, so that they can register themselves and register.py can import them all.
MODELS: Registry[type[CausalLM]] = Registry("model architecture")
