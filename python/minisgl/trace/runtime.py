"""The hook that FlashInfer Trace installs in the op registry (chapters 21-22).

Every op call of the engine goes through the registry (minisgl.ops): with no hook installed it
runs what the registry's rule picks. `Runtime` is the hook a trace session installs
(`minisgl.ops.hook.install(Runtime(...))`, done by trace_session for `trace_dir=` / `trace_set=`):

- the recorder (chapter 21) sees every call's canonical arguments and keeps a sample of them as
  FlashInfer Trace workloads;
- the applier (chapter 22) may swap the implementation for the fastest verified solution of this
  op and shape bucket.

Only the ops with an OpSpec (ops.py) are traced; the others (the linear layers, the one-token
fused projections) run as the rule picks, and the plain ops inside them are seen one by one.
An op that runs inside another traced op (store_kv inside attention is the exception, see
ops.py) belongs to the outer one and is neither recorded nor swapped.
"""

from __future__ import annotations

from typing import Any

import torch

from minisgl.ops import Op

from .ops import OPS


class Runtime:
    """What the trace session installed: a recorder, an applier, or both."""

    def __init__(self, recorder: Any = None, applier: Any = None) -> None:
        self.recorder = recorder
        self.applier = applier
        self.depth = 0  # > 0 while inside an opaque op: nested ops run as written
        self.paused = 0  # > 0 while recording is off (CUDA-graph warm-up and capture)
        # >>> ch22
        # without a recorder, only the ops the applier swaps somewhere need a look at the call
        self.only_ops = None if recorder is not None or applier is None else applier.swapped_ops
        # <<< ch22

    def run(self, op: Op, args: tuple) -> Any:
        # >>> ch22
        if self.only_ops is not None and op.name not in self.only_ops:
            return op.pick(*args)(*args)
        # <<< ch22
        spec = OPS.get(op.name)
        if spec is None or (self.depth and spec.opaque):
            return op.pick(*args)(*args)
        call = spec.site(*args)  # None: this call is not an instance of the op
        if call is None:
            return op.pick(*args)(*args)
        recorder = (self.recorder if self.recorder is not None and not self.paused
                    and not _capturing_graph() else None)
        # The inputs are copied before the call: some ops (store_kv) write what they read.
        pending = recorder.prepare(spec, call) if recorder and not spec.record_after else None
        chosen = self.applier.choose(spec, call) if self.applier is not None else None
        self.depth += spec.opaque
        try:
            out = spec.finish(call, chosen(*call.args)) if chosen is not None else \
                op.pick(*args)(*args)
        finally:
            self.depth -= spec.opaque
        if recorder is not None:
            if spec.record_after:  # attention reads the K/V that its own store_kv wrote
                pending = recorder.prepare(spec, call)
            if pending is not None:
                recorder.commit(pending, spec.outputs(call, out))
        return out

    def pause_recording(self) -> None:
        self.paused += 1

    def resume_recording(self) -> None:
        self.paused -= 1

    def wants_eager(self, batch: Any) -> bool:
        """Only while a capture still lacks a decode workload of this batch-size bucket
        (capture.Recorder): that decode step runs eagerly, once, instead of replaying."""
        return (self.recorder is not None and not batch.is_prefill
                and self.recorder.wants_eager(batch.size))


def _capturing_graph() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
