"""The base class of every layer: a plain holder of weight tensors, without autograd machinery.

Inference never needs gradients, hooks or training-mode switches, so instead of torch.nn.Module we
keep a tiny base class whose only job is to map dotted names ("layers.0.mlp.down_proj.weight") to
tensors. Those names follow Hugging Face checkpoints, which makes weight loading a dictionary walk.
Attributes whose names start with "_" (caches such as RoPE tables) are not weights.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch


class BaseOP:
    def named_weights(self, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
        for name, value in vars(self).items():
            if name.startswith("_"):
                continue
            if isinstance(value, torch.Tensor):
                yield prefix + name, value
            elif isinstance(value, BaseOP):
                yield from value.named_weights(f"{prefix}{name}.")

    def state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.named_weights())

    def load_state_dict(self, weights: dict[str, torch.Tensor]) -> None:
        """Copy every weight in; the names and shapes must match exactly, nothing may be left over."""
        own = self.state_dict()
        missing = sorted(own.keys() - weights.keys())
        unexpected = sorted(weights.keys() - own.keys())
        if missing or unexpected:
            raise KeyError(f"weights do not match the model: missing {missing[:5]}, "
                           f"unexpected {unexpected[:5]}")
        for name, tensor in own.items():
            src = weights[name]
            if src.shape != tensor.shape:
                raise ValueError(f"{name}: checkpoint shape {tuple(src.shape)} != "
                                 f"model shape {tuple(tensor.shape)}")
            tensor.copy_(src)


class OPList(BaseOP):
    """A list of layers whose weights are named by index, as "layers.0...", "layers.1..."."""

    def __init__(self, ops: list[BaseOP]) -> None:
        self.ops = ops

    def named_weights(self, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
        for i, op in enumerate(self.ops):
            yield from op.named_weights(f"{prefix}{i}.")

    def __iter__(self) -> Iterator[BaseOP]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def __getitem__(self, i: int) -> BaseOP:
        return self.ops[i]
