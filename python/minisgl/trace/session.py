"""What an engine started with trace_dir= and/or trace_set= installs (chapters 21-22)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .runtime import Runtime, install


@dataclass
class TraceSession:
    runtime: Runtime
    engine_config: Any  # the engine's config, with the attention backend apply chose

    def close(self) -> None:
        if self.runtime.recorder is not None:
            self.runtime.recorder.close()
        install(None)


def trace_session(config: Any) -> TraceSession | None:
    """Install the recorder (config.trace_dir) and the applier (config.trace_set); None when
    neither is asked for, and then every op runs exactly as written."""
    if not config.trace_dir and not config.trace_set:
        return None
    from .apply import Applier
    from .capture import Recorder

    recorder = Recorder(config.trace_dir) if config.trace_dir else None
    applier = Applier.load(config.trace_set, torch.device(config.device)) \
        if config.trace_set else None
    if applier is not None:
        backend = applier.attention_backend(config.attention_backend)
        config = dataclasses.replace(config, attention_backend=backend)
    runtime = Runtime(recorder, applier)
    install(runtime)
    return TraceSession(runtime, config)
