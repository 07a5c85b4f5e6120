"""Exercise 301: merge q/k/v and gate/up weights of a Hugging Face checkpoint."""

import torch


def merge_weights(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    # TODO 1: 把每个键拆成 (前缀, 模块名, 后缀)
    # TODO 2: q_proj/k_proj/v_proj 按 (前缀, 后缀) 分组，gate_proj/up_proj 同理
    # TODO 3: 检查每组是否完整、形状和 dtype 是否一致，不满足就抛 ValueError
    # TODO 4: 按规定的顺序 torch.cat(..., dim=0)，其余的键原样保留
    raise NotImplementedError("请实现 merge_weights")
