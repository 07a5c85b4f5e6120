"""Linear layers, cut for tensor parallelism (chapter 17). With one rank they are all plain
`y = x W^T + b`.

With tp ranks, a pair of linear layers around an elementwise step is split so that the ranks meet
only once: the first is column-parallel (each rank keeps a slice of the *output* rows, so it
computes a slice of the features and needs no communication), the second is row-parallel (each
rank keeps the matching slice of the *input* columns and computes a partial sum of the full
output; an all-reduce adds the partial sums). Attention heads and MLP features are independent of
each other, which is what makes the slices line up: qkv_proj -> attention -> o_proj and
gate_up_proj -> SiLU-and-mul -> down_proj.

q/k/v and gate/up are merged into one weight each, so one matrix multiply computes all of them;
each rank's weight is its slice of every part, stacked in the same order (models/shard.py cuts them
while the checkpoint is read).

A layer's weight may be quantized after loading (chapter 26, minisgl.quant): 8-bit values with one
scale per output row, `weight_scale`, and the scheme whose ops multiply that format, `quant`.
`matmul` is then the scheme's op instead of the plain one; everything around it (the tensor-
parallel sums, the bias added once) stays as it was.
"""

from __future__ import annotations

import torch

from minisgl import ops
from minisgl.distributed import all_reduce, divide, get_tp_info, kv_heads_per_rank

from .base import BaseOP


class _Linear(BaseOP):
    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        self.weight = torch.empty(out_features, in_features)
        self.bias = torch.empty(out_features) if bias else None
        # Plain until minisgl.quant quantizes the weight (chapter 26): then its row scales and
        # the scheme whose ops multiply it.
        self.weight_scale: torch.Tensor | None = None
        self.quant: ops.QuantScheme | None = None

    def matmul(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """x W^T + bias with this layer's weight, in whatever format it is stored."""
        if self.quant is None:
            return ops.linear(x, self.weight, bias)
        return self.quant.linear(x, self.weight, self.weight_scale, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.matmul(x, self.bias)


class LinearReplicated(_Linear):
    """Every rank holds the whole weight (e.g. the MoE router)."""


class LinearColParallelMerged(_Linear):
    """Several column-parallel outputs stacked in one weight, e.g. gate_proj and up_proj: each
    rank holds out_size / tp rows of every part."""

    def __init__(self, in_features: int, out_sizes: list[int], bias: bool = False) -> None:
        tp = get_tp_info().size
        self.out_sizes = [divide(size, tp, "a column-parallel output size") for size in out_sizes]
        super().__init__(in_features, sum(self.out_sizes), bias)


class LinearQKVMerged(_Linear):
    """q, k and v projections in one weight. Each rank holds num_qo_heads / tp query heads and the
    KV heads they read: num_kv_heads / tp of them, or one copied head when there are fewer KV
    heads than ranks. Rows: [(local qo heads + 2 * local kv heads) * head_dim]."""

    def __init__(self, hidden_size: int, head_dim: int, num_qo_heads: int, num_kv_heads: int,
                 bias: bool = False) -> None:
        tp = get_tp_info().size
        self.num_qo_heads = divide(num_qo_heads, tp, "the number of query heads")
        self.num_kv_heads = kv_heads_per_rank(num_kv_heads, tp)
        self.out_sizes = [self.num_qo_heads * head_dim, self.num_kv_heads * head_dim,
                          self.num_kv_heads * head_dim]
        super().__init__(hidden_size, sum(self.out_sizes), bias)


class LinearRowParallel(_Linear):
    """The projection after a column-parallel one (o_proj, down_proj): each rank holds
    in_features / tp input columns, so its product is a partial sum of the output; the all-reduce
    adds them up (the one communication of the pair). A bias is added once, after the sum."""

    def __init__(self, in_features: int, out_features: int, bias: bool = False) -> None:
        self._tp = get_tp_info().size
        super().__init__(divide(in_features, self._tp, "a row-parallel input size"),
                         out_features, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._tp == 1:
            return self.matmul(x, self.bias)
        y = all_reduce(self.matmul(x, None))
        return y if self.bias is None else y + self.bias

    def forward_silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """forward(silu_and_mul(gate_up)) as one op, which a batch-1 decode step on a GPU runs in
        one kernel (ops/fused_linear.py). Each rank's gate_up holds its own slice of gate and of
        up, so the activation needs nothing from other ranks; the partial sums are reduced and
        the bias added once, as in forward."""
        bias = self.bias if self._tp == 1 else None
        if self.quant is None:
            y = ops.silu_and_mul_linear(gate_up, self.weight, bias)
        else:
            y = self.quant.silu_linear(gate_up, self.weight, self.weight_scale, bias)
        if self._tp == 1:
            return y
        y = all_reduce(y)
        return y if self.bias is None else y + self.bias
