"""What LLM(trace_dir=...) (chapter 21) and/or trace_set= (chapter 22) starts before it builds the
engine: a Runtime installed as the op registry's hook. LLM imports this module on every start,
so it imports the rest of the package only when a trace is asked for."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from minisgl.ops import hook

if TYPE_CHECKING:
    from .runtime import Runtime


@dataclass
class TraceSession:
    runtime: Runtime | None  # None: apply kept the engine's code everywhere, nothing installed
    engine_config: Any  # the engine's config (with the attention backend apply chose, ch. 22)

    def close(self) -> None:
        if self.runtime is not None and self.runtime.recorder is not None:
            self.runtime.recorder.close()
        hook.install(None)


def trace_session(config: Any) -> TraceSession | None:
    """Install the recorder (config.trace_dir) and the applier (config.trace_set); None when
    neither is asked for, and then every op runs exactly as the registry picks. An applier that
    swaps no op is not installed either: its session only carries the attention backend it
    chose."""
    recorder = applier = None
    if config.trace_dir:
        from .capture import Recorder

        recorder = Recorder(config.trace_dir)
    # >>> ch22
    if config.trace_set:
        import dataclasses

        import torch

        from .apply import Applier

        applier = Applier.load(config.trace_set, torch.device(config.device))
        backend = applier.attention_backend(config.attention_backend)
        config = dataclasses.replace(config, attention_backend=backend)
        if not applier.swapped_ops:  # every op keeps the engine's code: nothing to dispatch
            applier = None
            if recorder is None:
                return TraceSession(None, config)
    # <<< ch22
    if recorder is None and applier is None:
        return None
    from .runtime import Runtime  # its op table (ops.py) imports flashinfer_bench

    runtime = Runtime(recorder, applier)
    hook.install(runtime)
    return TraceSession(runtime, config)
