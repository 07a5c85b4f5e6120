"""What an engine started with trace_dir= (chapter 21) and/or trace_set= (chapter 22) installs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .runtime import Runtime, install


@dataclass
class TraceSession:
    runtime: Runtime | None  # None: apply kept the engine's code everywhere, nothing installed
    engine_config: Any  # the engine's config (with the attention backend apply chose, ch. 22)

    def close(self) -> None:
        if self.runtime is not None and self.runtime.recorder is not None:
            self.runtime.recorder.close()
        install(None)


def trace_session(config: Any) -> TraceSession | None:
    """Install the recorder (config.trace_dir) and the applier (config.trace_set); None when
    neither is asked for, and then every op runs exactly as written. An applier that swaps no op
    is not installed either: its session only carries the attention backend it chose."""
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
    runtime = Runtime(recorder, applier)
    install(runtime)
    return TraceSession(runtime, config)
