"""Exercise 401: per-row top-k and top-p filtering of logits."""

import torch


def filter_logits(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    # TODO 1: top-k —— k <= 0 或 k >= V 时跳过；否则保留 logit >= 第 k 大的值
    # TODO 2: top-p —— p >= 1 时跳过；否则在 top-k 留下的位置上做 float32 softmax，
    #         排序、求前缀和，找到第一个 c[m] >= p，保留概率 >= 排序后第 m 个概率的位置
    # TODO 3: 不保留的位置填 -inf
    return logits  # 现在什么也没过滤
