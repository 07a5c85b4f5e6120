"""The registry's one hook point (chapters 21-22): an object that sees every op call.

With nothing installed an op call costs one check more. With a hook installed (`install`), every
op call goes to `hook.run(op, args)`, which runs the op and may record the call (a FlashInfer
Trace recorder, chapter 21) or run another implementation in its place (apply, chapter 22).
Whoever installs it lives above the engine: minisgl.trace builds its Runtime on this protocol,
and nothing here or in the engine imports it.

CUDA graphs (chapter 15) need two more things from it: recording is paused while graphs are
captured (their batches are padding, and a replay runs no Python), and a decode batch may ask
to run eagerly instead of replaying, so that its ops are seen once.
"""

from __future__ import annotations

from typing import Any, Protocol


class OpHook(Protocol):
    # `op` is a registry.Op; this module does not import registry.py, which imports it
    def run(self, op: Any, args: tuple) -> Any:
        """Run op on args (op.pick(*args)(*args), or a replacement) and return its result."""

    def pause_recording(self) -> None: ...

    def resume_recording(self) -> None: ...

    def wants_eager(self, batch: Any) -> bool:
        """Should this decode batch run eagerly instead of replaying its CUDA graph?"""


installed: OpHook | None = None


def install(hook: OpHook | None) -> None:
    """Make `hook` see every op call of this process (None: every op runs as the rule picks)."""
    global installed
    installed = hook


def pause_recording() -> None:
    """Stop recording until resume_recording() (CUDA-graph warm-up and capture)."""
    if installed is not None:
        installed.pause_recording()


def resume_recording() -> None:
    if installed is not None:
        installed.resume_recording()


def wants_eager(batch: Any) -> bool:
    return installed is not None and installed.wants_eager(batch)
