"""The reference MoE: a Python loop over the experts that received tokens.

Each expert is an ordinary SiLU-gated MLP. For expert e we gather the tokens routed to it, run its
two matrix multiplies, scale each row by the token's routing weight and add it back into that
token's output. Simple and exact, but it asks the GPU which experts have tokens (a host sync that
CUDA graphs cannot record) and launches a handful of small kernels per expert: with 128 experts
and a decode batch, that is hundreds of launches per layer. kernel/triton/fused_moe.py does the
same work in a fixed number of launches.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def experts_torch(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor,
                  topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
    """sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(x[t]) for every token t.

    x [T, H]; w13 [E, 2I, H] (gate rows, then up rows); w2 [E, H, I];
    topk_weights [T, k] (fp32); topk_ids [T, k]. Returns [T, H] in x's dtype.
    """
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    ids = topk_ids.long()
    for e in torch.unique(ids).tolist():  # only the experts that got at least one token
        tokens, slots = torch.where(ids == e)
        gate, up = F.linear(x[tokens], w13[e]).chunk(2, dim=-1)
        y = F.linear(F.silu(gate) * up, w2[e])
        out.index_add_(0, tokens, y.float() * topk_weights[tokens, slots, None].float())
    return out.to(x.dtype)
