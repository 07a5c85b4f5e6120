"""A saved workload, back in memory (chapter 21): its input tensors and its Definition's
reference `run()`, so a test can replay what the engine saw and the benchmark (chapter 22) can
run every solution on it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from flashinfer_bench.data import Definition, SafetensorsInput, Trace


def reference_fn(definition: Definition) -> Callable:
    """The Definition's `reference` source, compiled: its `run` function."""
    namespace: dict[str, Any] = {}
    exec(compile(definition.reference, f"<reference {definition.name}>", "exec"), namespace)
    return namespace["run"]


def load_inputs(root: Path, trace: Trace, device: torch.device,
                cache: dict[str, dict[str, torch.Tensor]]) -> dict[str, Any]:
    """A workload's inputs by name: tensors from its safetensors files (each file read once per
    `cache`, so weights shared by many workloads are loaded once), scalars as written."""
    inputs: dict[str, Any] = {}
    for name, source in trace.workload.inputs.items():
        if isinstance(source, SafetensorsInput):
            if source.path not in cache:
                cache[source.path] = safetensors.torch.load_file(str(Path(root) / source.path),
                                                                 device=str(device))
            inputs[name] = cache[source.path][source.tensor_key]
        elif source.type == "scalar":
            inputs[name] = source.value
        else:
            raise ValueError(f"{trace.definition}: input {name} is {source.type}; minisgl "
                             "workloads save every tensor")
    return inputs
