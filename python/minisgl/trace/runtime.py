"""The one dispatch point every traced engine op goes through (chapters 21-22).

An op is a function (or method) decorated with `@traced("rmsnorm")`. With no trace runtime
installed the decorator costs one check and calls the function as written. With one installed
(`install(Runtime(...))`, done by the engine for `trace_dir=` / `trace_set=`):

- the recorder (chapter 21) sees every call's canonical arguments and keeps a sample of them as
  FlashInfer Trace workloads;
- the applier (chapter 22) may swap the implementation for the fastest verified solution of this
  op and shape bucket.

An op that runs inside another traced op (the q/k RMSNorm inside RoPE, say) belongs to the outer
one and is neither recorded nor swapped. Attention is the exception: it records the store_kv it
contains, because the engine runs store_kv as an op of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


class Runtime:
    """What the engine installed: a recorder, an applier, or both."""

    def __init__(self, recorder: Any = None, applier: Any = None) -> None:
        self.recorder = recorder
        self.applier = applier
        self.depth = 0  # > 0 while inside an opaque op: nested ops run as written
        self.paused = 0  # > 0 while recording is off (CUDA-graph warm-up and capture)
        # >>> ch22
        # without a recorder, only the ops the applier swaps somewhere need a look at the call
        self.only_ops = None if recorder is not None or applier is None else applier.swapped_ops
        # <<< ch22

    def call(self, op: str, fn: Callable, args: tuple, kwargs: dict) -> Any:
        # >>> ch22
        if self.only_ops is not None and op not in self.only_ops:
            return fn(*args, **kwargs)
        # <<< ch22
        from .ops import OPS  # the op table imports the layers; import it on first use

        spec = OPS[op]
        if self.depth and spec.opaque:
            return fn(*args, **kwargs)
        call = spec.site(*args, **kwargs)  # None: this call is not an instance of the op
        if call is None:
            return fn(*args, **kwargs)
        recorder = (self.recorder if self.recorder is not None and not self.paused
                    and not _capturing_graph() else None)
        # The inputs are copied before the call: some ops (store_kv) write what they read.
        pending = recorder.prepare(spec, call) if recorder and not spec.record_after else None
        chosen = self.applier.choose(spec, call) if self.applier is not None else None
        self.depth += spec.opaque
        try:
            out = spec.finish(call, chosen(*call.args)) if chosen is not None else \
                fn(*args, **kwargs)
        finally:
            self.depth -= spec.opaque
        if recorder is not None:
            if spec.record_after:  # attention reads the K/V that its own store_kv wrote
                pending = recorder.prepare(spec, call)
            if pending is not None:
                recorder.commit(pending, spec.outputs(call, out))
        return out


_runtime: Runtime | None = None


def _capturing_graph() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def install(runtime: Runtime | None) -> None:
    """Make `runtime` the process's trace runtime (None: every op runs as written)."""
    global _runtime
    _runtime = runtime


def current() -> Runtime | None:
    return _runtime


def traced(op: str) -> Callable[[Callable], Callable]:
    """Route every call of the decorated function through the trace runtime as op `op`."""

    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def dispatch(*args: Any, **kwargs: Any) -> Any:
            rt = _runtime
            if rt is None:
                return fn(*args, **kwargs)
            return rt.call(op, fn, args, kwargs)

        return dispatch

    return wrap


def pause_recording() -> None:
    """Stop recording until resume_recording() (CUDA-graph warm-up and capture)."""
    if _runtime is not None:
        _runtime.paused += 1


def resume_recording() -> None:
    if _runtime is not None:
        _runtime.paused -= 1


def wants_eager(batch: Any) -> bool:
    """Should this decode batch run eagerly instead of replaying its CUDA graph? Only while a
    capture still lacks a decode workload of its batch-size bucket (capture.Recorder)."""
    rt = _runtime
    return (rt is not None and rt.recorder is not None and not batch.is_prefill
            and rt.recorder.wants_eager(batch.size))
