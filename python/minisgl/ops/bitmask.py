"""Masking the logits of constrained requests (chapter 25): `apply_token_bitmask`.

A grammar's allowed next tokens arrive as a bitmask, 32 tokens per int32 word: bit j of word i
says whether token 32 * i + j may come next (XGrammar's layout; a word of -1 allows all 32). The
op sets every forbidden token's logit to -inf, in place, so any sampler (greedy, temperature,
top-k/top-p) can only pick an allowed one. Rows of free requests carry a mask of all ones. In
place because a step's logits are [batch, vocabulary]: a copy of them per step costs more than
the masking on a CPU.

The reference unpacks the bits with integer ops; XGrammar's own kernels (its C++ loop on a CPU,
its Triton kernel on a GPU) do the same without building the [B, V] boolean tensor.
"""

from __future__ import annotations

import torch

from .registry import Impl, Op


def apply_token_bitmask_torch(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """logits [B, V], bitmask [B, ceil(V / 32)] int32: forbidden tokens' logits set to -inf."""
    bits = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    allowed = ((bitmask.unsqueeze(-1) >> bits) & 1).bool().flatten(1)[:, : logits.shape[-1]]
    logits.masked_fill_(~allowed, float("-inf"))


def apply_token_bitmask_xgrammar(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    import xgrammar as xgr

    # "triton" on a GPU: its "cuda" backend would compile a kernel with nvcc at the first call
    backend = "triton" if logits.is_cuda else "cpu"
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=logits.shape[-1],
                                    backend=backend)


def _xgrammar_takes(logits: torch.Tensor, bitmask: torch.Tensor) -> bool:
    # its CPU loop handles fp32 only
    return logits.is_cuda or logits.dtype == torch.float32


apply_token_bitmask = Op("apply_token_bitmask", apply_token_bitmask_torch)
apply_token_bitmask.add(Impl("xgrammar", apply_token_bitmask_xgrammar, takes=_xgrammar_takes))
