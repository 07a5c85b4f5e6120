"""Loading Hugging Face safetensors checkpoints into our models.

Checkpoints store q_proj, k_proj, v_proj and gate_proj, up_proj separately; our layers keep each
group merged in one weight (one matrix multiply instead of three). Loading therefore renames
those tensors and concatenates each group in order once all its parts have been read.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from safetensors import safe_open

from minisgl.distributed import get_tp_info
from minisgl.quant.model import quantize_model, weight_bytes
from minisgl.utils import init_logger
from minisgl.utils.misc import MinisglError

from .base import CausalLM
from .config import ModelConfig
from .register import create_model
from .shard import cut_for, read_cut

# (merged name, checkpoint name, position in the merged weight)
STACKED = [
    ("qkv_proj", "q_proj", 0),
    ("qkv_proj", "k_proj", 1),
    ("qkv_proj", "v_proj", 2),
    ("gate_up_proj", "gate_proj", 0),
    ("gate_up_proj", "up_proj", 1),
]
_PARTS = {"qkv_proj": 3, "gate_up_proj": 2}

logger = init_logger(__name__)


def _merged_name(name: str) -> tuple[str, int] | None:
    for merged, part, index in STACKED:
        if f".{part}." in name:
            return name.replace(f".{part}.", f".{merged}."), index
    return None


def iter_checkpoint(model_dir: Path, config: ModelConfig | None = None):
    """Yield (name, tensor) from every *.safetensors file, with one clear error per bad file.

    With tensor parallelism and `config` given, each tensor is read as this rank's slice only
    (models/shard.py), so no rank ever holds a whole sharded weight."""
    tp = get_tp_info()
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise MinisglError(f"{model_dir} has no *.safetensors files (use --dummy-weight to run "
                           "the architecture with random weights)")
    for file in files:
        try:
            with safe_open(str(file), framework="pt", device="cpu") as f:
                for name in f.keys():
                    if config is None or tp.size == 1:
                        yield name, f.get_tensor(name)
                        continue
                    part = f.get_slice(name)
                    yield name, read_cut(part, cut_for(name, part.get_shape(), config, tp))
        except MinisglError:
            raise
        except Exception as e:  # safetensors raises its own error type for broken files
            raise MinisglError(f"{file} is not a readable safetensors file "
                               f"(truncated or corrupt?): {e}") from None


def load_hf_weights(model_dir: Path, config: ModelConfig) -> dict[str, torch.Tensor]:
    """The checkpoint as our model's state dict (merged groups, tied head dropped), on CPU."""
    out: dict[str, torch.Tensor] = {}
    pending: dict[str, dict[int, torch.Tensor]] = {}
    for name, tensor in iter_checkpoint(model_dir, config):
        if name.endswith("rotary_emb.inv_freq"):
            continue  # old checkpoints saved the RoPE table; we compute it
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # tied: the head is the embedding table
        merged = _merged_name(name)
        if merged is None:
            out[name] = tensor
            continue
        merged_name, index = merged
        parts = pending.setdefault(merged_name, {})
        parts[index] = tensor
        if len(parts) == _PARTS[merged_name.split(".")[-2]]:
            out[merged_name] = torch.cat([parts[i] for i in range(len(parts))], dim=0)
            del pending[merged_name]
    if pending:
        raise MinisglError(f"{model_dir}: incomplete merged weights {sorted(pending)[:3]}")
    return out


def init_dummy_weights(model: CausalLM, seed: int = 0) -> None:
    """Random weights for running an architecture without its checkpoint (--dummy-weight).

    Norm scales are 1 and the rest N(0, 0.02), like a freshly initialised Hugging Face model, so
    activations stay in a sane range through all layers.
    """
    gen = torch.Generator().manual_seed(seed)
    # >>> ch18
    # A GPU model draws its values on the GPU: Qwen3-30B-A3B has 30 billion weights, minutes of
    # work for a CPU generator and 120 GB of fp32 on the way. (Different numbers than the CPU's.)
    device = next(t.device for _, t in model.named_weights())
    if device.type == "cuda":
        gen = torch.Generator(device=device).manual_seed(seed)
    # <<< ch18
    for name, tensor in model.named_weights():
        if name.endswith("norm.weight"):
            tensor.fill_(1.0)
        # >>> ch18
        elif tensor.is_cuda:
            tensor.normal_(0.0, 0.02, generator=gen)
        # <<< ch18
        else:
            values = torch.randn(tensor.shape, generator=gen, dtype=torch.float32) * 0.02
            tensor.copy_(values)


def load_model(model_dir: str | Path, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", dummy_weight: bool = False,
               # >>> ch26
               quantization: str | None = None,
               # <<< ch26
               config: ModelConfig | None = None) -> CausalLM:
    """The folder's model with its weights; pass `config` when the caller has already read it."""
    model_dir = Path(model_dir)
    config = config or ModelConfig.from_path(model_dir)
    # One line before and one after: loading is the longest quiet stretch of a start-up.
    started = time.perf_counter()
    where = f"{str(dtype).removeprefix('torch.')} on {device}"
    if dummy_weight:
        logger.info("random weights (--dummy-weight) for %s, %s ...", model_dir.name, where)
    else:
        files = sorted(model_dir.glob("*.safetensors"))
        size_mib = sum(f.stat().st_size for f in files) / 2**20
        logger.info("loading weights: %s, %d safetensors file%s (%.0f MiB), as %s ...",
                    model_dir.name, len(files), "s" * (len(files) != 1), size_mib, where)
    model = create_model(config, dtype, device)
    if dummy_weight:
        init_dummy_weights(model)
    else:
        try:
            model.load_state_dict(load_hf_weights(model_dir, config))
        except (KeyError, ValueError) as e:
            raise MinisglError(f"{model_dir}: {e.args[0]}") from None
    # >>> ch26
    if quantization is not None:  # 8-bit projections (chapter 26), each quantized where it lies
        quantized = quantize_model(model, quantization)
        logger.info("quantized %d linear weights to %s: the weights now take %.0f MiB",
                    quantized, quantization, weight_bytes(model) / 2**20)
    # <<< ch26
    count = sum(t.numel() for _, t in model.named_weights())
    logger.info("weights ready: %.1fM parameters in %.1f s", count / 1e6,
                time.perf_counter() - started)
    return model
