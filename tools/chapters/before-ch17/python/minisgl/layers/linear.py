"""Linear layers. Names follow the official mini-sglang, where they also say how tensor
parallelism (chapter 17) will cut them: column-parallel layers split their outputs, row-parallel
layers split their inputs. With one GPU they are all plain `y = x W^T + b`.

q/k/v and gate/up are merged into one weight each, so one matrix multiply computes all of them.
"""

from __future__ import annotations

import torch

from minisgl import ops

from .base import BaseOP


class _Linear(BaseOP):
    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        self.weight = torch.empty(out_features, in_features)
        self.bias = torch.empty(out_features) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ops.linear(x, self.weight, self.bias)


class LinearReplicated(_Linear):
    """Every rank holds the whole weight."""


class LinearColParallelMerged(_Linear):
    """Several column-parallel outputs stacked in one weight, e.g. gate_proj and up_proj."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool = False) -> None:
        super().__init__(in_features, sum(out_sizes), bias)
        self.out_sizes = out_sizes


class LinearQKVMerged(LinearColParallelMerged):
    """q, k and v projections in one weight: [num_qo_heads + 2 * num_kv_heads, head_dim] rows."""

    def __init__(self, hidden_size: int, head_dim: int, num_qo_heads: int, num_kv_heads: int,
                 bias: bool = False) -> None:
        sizes = [num_qo_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim]
        super().__init__(hidden_size, sizes, bias)


class LinearRowParallel(_Linear):
    """The projection after a column-parallel one (o_proj, down_proj)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        super().__init__(in_features, out_features, bias)
