"""Qwen3-MoE: the Qwen3 decoder whose MLPs are sparse Mixture-of-Experts blocks.

Attention is Qwen3's (q/k RMSNorm, no biases). In every layer that config.is_moe_layer picks
(not in mlp_only_layers, every decoder_sparse_step-th), the MLP is layers/moe.py's SparseMoeBlock: a
router scores the experts, each token runs through its top k and gets their weighted sum. The
other layers keep a dense MLP of intermediate_size.

Checkpoints store each expert's three matrices separately (`experts.7.gate_proj.weight`, ...).
weight.py already merges every gate/up pair (`experts.7.gate_up_proj.weight`); here the experts of a
layer are stacked into the [E, 2I, H] and [E, H, I] tensors the grouped kernel reads.
"""

from __future__ import annotations

import re

import torch

from .base import MODELS, CausalLM

_PER_EXPERT = re.compile(r"^(?P<prefix>.*\.experts)\.(?P<expert>\d+)\.(?P<kind>gate_up_proj|down_proj)"
                         r"\.weight$")


def stack_experts(weights: dict[str, torch.Tensor], num_experts: int) -> dict[str, torch.Tensor]:
    """Replace `<layer>.experts.<e>.<kind>.weight` (e = 0..E-1) by `<layer>.experts.<kind>`."""
    out: dict[str, torch.Tensor] = {}
    groups: dict[str, dict[int, torch.Tensor]] = {}
    for name, tensor in weights.items():
        match = _PER_EXPERT.match(name)
        if match is None:
            out[name] = tensor
            continue
        stacked = f"{match['prefix']}.{match['kind']}"
        groups.setdefault(stacked, {})[int(match["expert"])] = tensor
    for stacked, experts in groups.items():
        if sorted(experts) != list(range(num_experts)):
            missing = sorted(set(range(num_experts)) - experts.keys())[:5]
            extra = sorted(experts.keys() - set(range(num_experts)))[:5]
            raise KeyError(f"{stacked}: expected experts 0..{num_experts - 1}, "
                           f"missing {missing}, unexpected {extra}")
        out[stacked] = torch.stack([experts[e] for e in range(num_experts)])
    return out


@MODELS.register("Qwen3MoeForCausalLM")
class Qwen3MoeForCausalLM(CausalLM):
    def load_state_dict(self, weights: dict[str, torch.Tensor]) -> None:
        assert self.config.moe is not None, "config.json has no num_experts"
        super().load_state_dict(stack_experts(weights, self.config.moe.num_experts))
