"""The sparse MoE block that replaces the dense MLP in Qwen3-MoE's decoder layers.

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
from minisgl.layers import BaseOP, LinearReplicated
from minisgl.models.config import ModelConfig

from . import fused_moe


class Experts(BaseOP):
    def __init__(self, num_experts: int, hidden_size: int, intermediate_size: int) -> None:
        self.gate_up_proj = torch.empty(num_experts, 2 * intermediate_size, hidden_size)
        self.down_proj = torch.empty(num_experts, hidden_size, intermediate_size)


class SparseMoeBlock(BaseOP):
    def __init__(self, config: ModelConfig, backend: str = "auto") -> None:
        moe = config.moe
        assert moe is not None, "a MoE block needs the config's MoE fields"
        if config.hidden_act != "silu":
            raise ValueError(f"hidden_act {config.hidden_act!r} is not supported (only silu)")
        self.gate = LinearReplicated(config.hidden_size, moe.num_experts, bias=False)
        self._tp = get_tp_info().size
        local_inter = divide(moe.moe_intermediate_size, self._tp, "moe_intermediate_size")
        self.experts = Experts(moe.num_experts, config.hidden_size, local_inter)
        self.top_k = moe.num_experts_per_tok
        self.normalize = moe.norm_topk_prob
        self.backend = backend  # auto | torch | triton (see minisgl.moe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = fused_moe(x, self.gate.forward(x), self.experts.gate_up_proj,
                        self.experts.down_proj, self.top_k, self.normalize, self.backend)
        return out if self._tp == 1 else all_reduce(out)
