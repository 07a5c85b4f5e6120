"""The op registry: each op the engine runs, its implementations, and the one rule that picks.

An op is declared once (ops/norm.py, ops/kv.py, ...) with its torch reference: the code a CPU
runs, and the result every faster implementation must match. Later chapters add faster ones to
it from files of their own: the CUDA extension (chapter 19, ops/cuda_impls.py) and the Triton
kernels (chapters 18 and 20). Layers and models call an op by name, `ops.rms_norm(x, w, eps)`,
and never ask which code runs. That is decided here, by the same rule for every op (Op.pick):

    the first faster implementation that takes the call and is available, else the reference.

An implementation *takes* a call by looking at its arguments: a tensor on a GPU, and for the
one-token GEMVs exactly one contiguous token. It is *available* when the whole process can run
it: the CUDA extension was built; the Triton kernels were not switched off with
MINISGL_DISABLE_FUSED_KERNELS=1. Both checks run on every call, so both must stay cheap (a
tensor attribute, a cached answer): an eager prefill makes hundreds of op calls per batch.
Ops take positional arguments only: the rule, and a trace (chapter 21), see them as one tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from . import hook


def gpu_tensor(t: torch.Tensor, *_: Any) -> bool:
    """The call's first argument lives on a GPU: what every faster implementation needs."""
    return t.is_cuda


def always() -> bool:
    return True


@dataclass(frozen=True)
class Impl:
    """A faster implementation of an op, with the op's signature."""

    kind: str  # what it is written in: "cuda", "triton" (trace/ names its Solutions after it)
    fn: Callable[..., Any]
    takes: Callable[..., bool] = gpu_tensor  # the op's arguments -> can it run this call?
    available: Callable[[], bool] = always  # can this process run it at all? (cached)


ALL: dict[str, Op] = {}  # every declared op by name (trace/ builds its Solutions from them)


@dataclass(eq=False)
class Op:
    name: str  # "rmsnorm": the name FlashInfer Trace Definitions are made from (chapter 21)
    reference: Callable[..., Any]  # the torch code: a CPU runs it, faster ones must match it
    faster: list[Impl] = field(default_factory=list)  # in order of preference

    def __post_init__(self) -> None:
        if self.name in ALL:
            raise ValueError(f"op {self.name!r} is declared twice")
        ALL[self.name] = self

    def add(self, impl: Impl) -> None:
        self.faster.append(impl)

    def pick(self, *args: Any) -> Callable[..., Any]:
        """The implementation that runs these arguments: the rule of the module docstring."""
        for impl in self.faster:
            if impl.takes(*args) and impl.available():
                return impl.fn
        return self.reference

    def kind_for(self, *args: Any) -> str:
        """What pick() chooses, by name ("torch" for the reference)."""
        fn = self.pick(*args)
        return next((impl.kind for impl in self.faster if impl.fn is fn), "torch")

    def implementation(self, kind: str) -> Callable[..., Any]:
        """The implementation called `kind`, whatever pick() would choose (a backend asked for
        by name, a benchmark that times each one)."""
        if kind == "torch":
            return self.reference
        for impl in self.faster:
            if impl.kind == kind:
                return impl.fn
        raise KeyError(f"op {self.name!r} has no {kind!r} implementation")

    def __call__(self, *args: Any) -> Any:
        # >>> ch21
        if hook.installed is not None:  # a trace recorder or applier sees the call (ch. 21-22)
            return hook.installed.run(self, args)
        # <<< ch21
        return self.pick(*args)(*args)
