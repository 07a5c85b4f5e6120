"""Which slice of each checkpoint tensor a tensor-parallel rank reads (chapter 17).

Each rank reads only its own slice from the safetensors file (safetensors reads a slice without
the rest), so no rank ever holds a whole sharded weight. The rule per checkpoint name:

    q_proj, gate_proj, up_proj (weight, bias)   rows: a contiguous 1/tp (whole heads / features)
    k_proj, v_proj                              rows of this rank's KV heads (a copy of one head
                                                when there are fewer KV heads than ranks)
    o_proj, down_proj (weight)                  columns: the inputs that match the rows above
    embed_tokens, lm_head                       rows: ceil(vocab / tp) tokens, zero-padded at the end
    anything else (norms, the MoE router)       whole, on every rank

MoE experts' gate_proj / up_proj / down_proj follow the same rules, one expert at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.distributed import TPInfo, divide, kv_head_start, kv_heads_per_rank
from minisgl.utils.misc import cdiv

from .config import ModelConfig


@dataclass(frozen=True)
class Cut:
    """Read [start, start + length) along `dim`, then zero-pad that dimension to `padded`."""

    dim: int
    start: int
    length: int
    padded: int


def cut_for(name: str, shape: list[int], config: ModelConfig, tp: TPInfo) -> Cut | None:
    """How this rank reads checkpoint tensor `name` of `shape`; None means whole."""
    if tp.size == 1:
        return None
    parts = name.split(".")
    module, kind = (parts[-2], parts[-1]) if len(parts) >= 2 else ("", "")
    if module in ("embed_tokens", "lm_head"):
        per_rank = cdiv(shape[0], tp.size)
        start = min(tp.rank * per_rank, shape[0])
        return Cut(0, start, min(per_rank, shape[0] - start), per_rank)
    if module in ("q_proj", "gate_proj", "up_proj"):
        return _even(0, shape[0], tp, name)
    if module in ("k_proj", "v_proj"):
        heads = config.num_kv_heads
        head_dim = divide(shape[0], heads, f"{name}: rows per KV head")
        local = kv_heads_per_rank(heads, tp.size)
        start = kv_head_start(heads, tp.rank, tp.size) * head_dim
        return Cut(0, start, local * head_dim, local * head_dim)
    if module in ("o_proj", "down_proj") and kind == "weight":
        return _even(1, shape[1], tp, name)
    return None


def _even(dim: int, size: int, tp: TPInfo, name: str) -> Cut:
    per_rank = divide(size, tp.size, f"{name}: dimension {dim}")
    return Cut(dim, tp.rank * per_rank, per_rank, per_rank)


def read_cut(tensor_slice, cut: Cut | None) -> torch.Tensor:
    """Read one tensor from a safetensors `get_slice` handle, only the rows/columns of `cut`."""
    if cut is None:
        return tensor_slice[:]
    end = cut.start + cut.length
    part = tensor_slice[cut.start : end] if cut.dim == 0 else tensor_slice[:, cut.start : end]
    if cut.length == cut.padded:
        return part
    pad = list(part.shape)
    pad[cut.dim] = cut.padded - cut.length
    return torch.cat([part, part.new_zeros(pad)], dim=cut.dim)
