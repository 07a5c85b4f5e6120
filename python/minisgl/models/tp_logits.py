"""A model's logits with its weights split over N tensor-parallel ranks on this machine (chapter
17's check): to compare with the logits of one rank that holds every weight.

The ranks are CPU processes in a gloo group (distributed/local.py starts them); each loads its
slices of the model (models/shard.py), runs the same tokens, and rank 0 writes the logits to a
safetensors file, never a pickle.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from minisgl.distributed import destroy_tp, init_tp
from minisgl.distributed.local import spawn_ranks

from .weight import load_model


def _logits_rank(rank: int, tp: int, init_method: str, cases: list[tuple[str, list[int]]],
                 out: str) -> None:
    init_tp(rank, tp, init_method, "cpu")
    try:
        results = {}
        for i, (model_dir, ids) in enumerate(cases):
            model = load_model(model_dir)
            results[str(i)] = model.forward(torch.tensor(ids), torch.arange(len(ids)))
        if rank == 0:
            save_file({k: v.contiguous() for k, v in results.items()}, out)
    finally:
        destroy_tp()


def tp_logits(model_dir: str | Path | list[str | Path], ids: list[int] | list[list[int]],
              tp: int) -> list[torch.Tensor]:
    """fp32 logits [len(ids), vocab] of a model split over `tp` CPU ranks (gloo), one tensor
    per case: a folder and its ids, or lists of both (one set of processes for all of them)."""
    if isinstance(model_dir, (str, Path)):
        model_dir, ids = [model_dir], [ids]
    cases = [(str(d), [int(i) for i in case]) for d, case in zip(model_dir, ids, strict=True)]
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "logits.safetensors")
        spawn_ranks(_logits_rank, tp, cases, out)
        found = load_file(out)
        return [found[str(i)] for i in range(len(cases))]
