"""The forward passes of a speculative step, built outside the scheduler (chapter 24).

A speculative step runs batches that the scheduler's own preparation does not make: the draft
model catching up on tokens it has not seen, its decode steps over tokens that are only guesses,
and the target's verification of k+1 tokens per request. Each is a Batch like any other; the
requests in it are *views*: Req objects that share the real request's page-table row but carry
their own cached_len and extend_len, because the draft model is at a different point of the
sequence than the target.
"""

from __future__ import annotations

import torch

from minisgl.core import Batch, Req
from minisgl.engine.engine import Engine
from minisgl.utils.transfer import to_device


def view(req: Req, cached_len: int, extend_len: int) -> Req:
    """The request as a batch sees it: K/V of its first cached_len tokens exist, extend_len more
    are computed now (the attention backends read only these, table_idx and seq_len)."""
    return Req(uid=req.uid, input_ids=req.input_ids, sampling_params=req.sampling_params,
               prompt_len=req.prompt_len, table_idx=req.table_idx, cached_len=cached_len,
               extend_len=extend_len)


def make_batch(engine: Engine, reqs: list[Req], tokens: list[list[int]]) -> Batch:
    """A batch computing tokens[i] for reqs[i] at positions cached_len, cached_len + 1, ...:
    "decode" when every request brings one token (a CUDA graph can replay it), else "prefill"."""
    ids: list[int] = []
    positions: list[int] = []
    rows: list[int] = []
    for req, new in zip(reqs, tokens):
        ids += new
        positions += range(req.cached_len, req.cached_len + len(new))
        rows += [req.table_idx] * len(new)
    one_each = all(len(new) == 1 for new in tokens)
    batch = Batch(reqs, "decode" if one_each else "prefill")
    device = engine.device
    batch.input_ids = to_device(ids, torch.int64, device)
    batch.positions = to_device(positions, torch.int64, device)
    batch.out_loc = engine.page_table[to_device(rows, torch.int64, device),
                                      batch.positions].long()
    return batch


def last_indices(tokens: list[list[int]], device: torch.device) -> torch.Tensor:
    """Where each request's last new token sits in the batch's flat token list."""
    ends, total = [], 0
    for new in tokens:
        total += len(new)
        ends.append(total - 1)
    return to_device(ends, torch.int64, device)
