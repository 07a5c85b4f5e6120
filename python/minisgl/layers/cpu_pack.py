"""Packing a model's linear weights for the CPU, once, after loading (chapter 20, for the CPU).

ops/cpu_impls.py explains why: oneDNN reads a weight reordered into its own layout about twice as
fast as F.linear reads the plain one. Each linear layer's weight is replaced by its packed form
(no second copy is kept: the model's memory stays the same), and a tied LM head, which shares the
embedding table, gets a packed copy of its own, since the embedding still looks rows up.
Afterwards the weights can no longer be read as numbers or loaded into: the engine packs last.
fp32 layer weights stay plain where the C++ linear builds (ops/cpu_impls.py: keep_plain); the LM
head keeps its packed copy for the op-by-op path (engine/cpu_step.py reads the plain one). Where
the C++ library was built with AVX-512, fp32 weights (and bf16 ones with AVX-512 BF16) go to its
own panels instead (ops/cpu_impls.py: packed_form): its linear over them beats oneDNN there at
decode sizes, and the one-call decode step of engine/cpu_step.py reads the same panels.
"""

from __future__ import annotations

from collections.abc import Iterator

from minisgl.ops import hook
from minisgl.ops.cpu_impls import packed_form

from .base import BaseOP, OPList
from .embedding import ParallelLMHead
from .linear import _Linear


def sub_ops(op: BaseOP) -> Iterator[BaseOP]:
    """op and every layer below it (underscore attributes, such as a tied head's embedding, are
    references, not children)."""
    yield op
    children = op.ops if isinstance(op, OPList) else [
        value for name, value in vars(op).items() if not name.startswith("_")]
    for child in children:
        if isinstance(child, BaseOP):
            yield from sub_ops(child)


def pack_linears(model: BaseOP) -> int:
    """Pack every linear weight of the model that this CPU reads faster packed; the number
    packed."""
    # >>> ch21
    if hook.installed is not None:  # a trace runs (and replays) the torch code on plain weights
        return 0
    # <<< ch21
    count = 0
    for op in sub_ops(model):
        if isinstance(op, _Linear):
            if (packed := packed_form(op.weight)) is not None:
                op.weight = packed
                count += 1
        elif isinstance(op, ParallelLMHead) and not hasattr(op, "_packed_weight"):
            if (packed := packed_form(op.logits_weight(), lm_head=True)) is not None:
                op._packed_weight = packed
                count += 1
    return count
