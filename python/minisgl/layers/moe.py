"""The sparse Mixture-of-Experts block that replaces the dense MLP in Qwen3-MoE's decoder layers.

Weights follow Hugging Face names: `mlp.gate.weight` is the router [E, H]; the experts are stacked
into `mlp.experts.gate_up_proj` [E, 2I, H] (each expert's gate rows, then its up rows) and
`mlp.experts.down_proj` [E, H, I], the layout transformers 5 keeps in memory. Checkpoints store
one matrix per expert; models/qwen3_moe.py stacks them at load time.

Tensor parallelism (chapter 17) shards the experts like the dense MLP: each rank keeps I / tp
of every expert's gate and up rows and the matching columns of its down matrix (models/shard.py
reads them so), routes every token itself (the router is replicated, so every rank picks the same
experts), and the block's output, a partial sum on each rank, is all-reduced across ranks.
"""

from __future__ import annotations

import torch

from minisgl.distributed import all_reduce, divide, get_tp_info
from minisgl.ops.moe import fused_moe

from .base import BaseOP
from .linear import LinearReplicated


class Experts(BaseOP):
    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int) -> None:
        self.gate_up_proj = torch.empty(num_experts, 2 * intermediate_size, hidden_size)
        self.down_proj = torch.empty(num_experts, hidden_size, intermediate_size)


class SparseMoeBlock(BaseOP):
    def __init__(self, hidden_size: int, num_experts: int, intermediate_size: int, top_k: int,
                 normalize: bool, backend: str = "auto") -> None:
        """intermediate_size is one expert's (config.json's moe_intermediate_size); top_k experts
        per token, their weights rescaled to sum to 1 when `normalize` (norm_topk_prob)."""
        self.gate = LinearReplicated(hidden_size, num_experts, bias=False)
        self._tp = get_tp_info().size
        local_inter = divide(intermediate_size, self._tp, "moe_intermediate_size")
        self.experts = Experts(num_experts, hidden_size, local_inter)
        self.top_k = top_k
        self.normalize = normalize
        self.backend = backend  # auto | torch | triton (see ops/moe.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = fused_moe(x, self.gate.forward(x), self.experts.gate_up_proj,
                        self.experts.down_proj, self.top_k, self.normalize, self.backend)
        return out if self._tp == 1 else all_reduce(out)
