"""The few facts of a Hugging Face config.json that the engine needs, as a typed dataclass."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minisgl.utils.misc import MinisglError


@dataclass(frozen=True)
class RopeScaling:
    """config.json's `rope_scaling`; kind "default" means plain RoPE."""

    kind: str = "default"  # default | linear | llama3 | yarn
    factor: float = 1.0
    original_max_position: int | None = None  # the context length the model was trained with
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    attention_factor: float | None = None  # yarn; None means 0.1 * ln(factor) + 1


@dataclass(frozen=True)
class ModelConfig:
    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    hidden_act: str = "silu"
    attention_bias: bool = False  # Qwen2 has biases on q/k/v projections
    use_qk_norm: bool = False  # Qwen3 normalises q and k per head before RoPE
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    torch_dtype: str = "float32"
    # >>> ch18
    moe: MoEConfig | None = None  # Qwen3-MoE: which layers route tokens to experts, and how

    def is_moe_layer(self, layer_id: int) -> bool:
        """Whether layer `layer_id` holds experts (HF: not in mlp_only_layers, every
        decoder_sparse_step-th layer) or a dense MLP of intermediate_size."""
        m = self.moe
        return (m is not None and m.num_experts > 0 and layer_id not in m.mlp_only_layers
                and (layer_id + 1) % m.decoder_sparse_step == 0)
    # <<< ch18

    @staticmethod
    def from_dict(raw: dict[str, Any], generation: dict[str, Any] | None = None) -> ModelConfig:
        """raw: config.json; generation: generation_config.json, where the folder has one."""
        archs = raw.get("architectures") or []
        if not archs:
            raise MinisglError("config.json has no 'architectures' entry; cannot tell which model it is")
        try:
            heads = int(raw["num_attention_heads"])
            hidden = int(raw["hidden_size"])
            return ModelConfig(
                architecture=archs[0],
                vocab_size=int(raw["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(raw["intermediate_size"]),
                num_layers=int(raw["num_hidden_layers"]),
                num_qo_heads=heads,
                num_kv_heads=int(raw.get("num_key_value_heads") or heads),
                head_dim=int(raw.get("head_dim") or hidden // heads),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                rope_theta=float(_rope_theta(raw)),
                max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                hidden_act=str(raw.get("hidden_act", "silu")),
                attention_bias=bool(raw.get("attention_bias", archs[0] == "Qwen2ForCausalLM")),
                use_qk_norm=archs[0] in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"),
                rope_scaling=_rope_scaling(raw),
                bos_token_id=raw.get("bos_token_id"),
                eos_token_ids=_eos_token_ids(raw, generation or {}),
                torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "float32"),
                # >>> ch18
                moe=_moe_config(raw),
                # <<< ch18
            )
        except KeyError as missing:
            raise MinisglError(f"config.json lacks the required field {missing}") from None

    @staticmethod
    def from_path(model_dir: str | Path) -> ModelConfig:
        """The config of a model folder; the one place that reads its config.json."""
        folder = Path(model_dir)
        if not (folder / "config.json").is_file():
            raise MinisglError(f"{model_dir} has no config.json; is it a Hugging Face model folder?")
        generation = folder / "generation_config.json"
        return ModelConfig.from_dict(_read_json(folder / "config.json"),
                                     _read_json(generation) if generation.is_file() else None)


# >>> ch18
@dataclass(frozen=True)
class MoEConfig:
    """config.json's Mixture-of-Experts fields (Qwen3-MoE)."""

    num_experts: int
    num_experts_per_tok: int  # top-k: experts each token is sent to
    moe_intermediate_size: int  # of one expert; dense layers use intermediate_size
    norm_topk_prob: bool  # rescale the k chosen probabilities to sum to 1
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()


def _moe_config(raw: dict[str, Any]) -> MoEConfig | None:
    # The hub's config names the expert count `num_experts`; transformers 5 saves it as
    # `num_local_experts` (an attribute_map alias), so read either.
    experts = raw.get("num_experts", raw.get("num_local_experts"))
    if not experts:
        return None
    moe = MoEConfig(
        num_experts=int(experts),
        num_experts_per_tok=int(raw["num_experts_per_tok"]),
        moe_intermediate_size=int(raw["moe_intermediate_size"]),
        norm_topk_prob=bool(raw.get("norm_topk_prob", False)),
        decoder_sparse_step=int(raw.get("decoder_sparse_step") or 1),
        mlp_only_layers=tuple(int(i) for i in raw.get("mlp_only_layers") or ()),
    )
    if not 1 <= moe.num_experts_per_tok <= moe.num_experts:
        raise MinisglError(f"num_experts_per_tok {moe.num_experts_per_tok} must be in "
                           f"1..num_experts ({moe.num_experts})")
    if moe.decoder_sparse_step < 1:
        raise MinisglError(f"decoder_sparse_step must be >= 1, not {moe.decoder_sparse_step}")
    return moe
# <<< ch18


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise MinisglError(f"{path} is not valid JSON: {e}") from None


def _eos_token_ids(raw: dict[str, Any], generation: dict[str, Any]) -> tuple[int, ...]:
    """Every id that ends a generation: generation_config.json's, then config.json's.

    Qwen3's config.json names only <|im_end|> (end of a chat turn); its generation_config.json
    adds <|endoftext|> (end of a document). Each may be one id or a list; the order is kept and
    duplicates are dropped.
    """
    ids = [*_as_list(generation.get("eos_token_id")), *_as_list(raw.get("eos_token_id"))]
    return tuple(dict.fromkeys(ids))


def _as_list(value: int | list[int] | None) -> list[int]:
    if value is None:
        return []
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def _rope_params(raw: dict[str, Any]) -> dict[str, Any]:
    # transformers 5 moved rope settings into `rope_parameters`; older files use `rope_scaling`.
    return raw.get("rope_parameters") or raw.get("rope_scaling") or {}


def _rope_theta(raw: dict[str, Any]) -> float:
    return raw.get("rope_theta") or _rope_params(raw).get("rope_theta") or 10000.0


def _rope_scaling(raw: dict[str, Any]) -> RopeScaling:
    params = _rope_params(raw)
    kind = params.get("rope_type") or params.get("type") or "default"
    if kind not in ("default", "linear", "llama3", "yarn"):
        raise MinisglError(f"rope_scaling type {kind!r} is not supported "
                           "(default, linear, llama3, yarn)")
    original = params.get("original_max_position_embeddings")
    attention_factor = params.get("attention_factor")
    return RopeScaling(
        kind=kind,
        factor=float(params.get("factor", 1.0)),
        original_max_position=int(original) if original else None,
        low_freq_factor=float(params.get("low_freq_factor", 1.0)),
        high_freq_factor=float(params.get("high_freq_factor", 4.0)),
        beta_fast=float(params.get("beta_fast", 32.0)),
        beta_slow=float(params.get("beta_slow", 1.0)),
        attention_factor=float(attention_factor) if attention_factor is not None else None,
    )
