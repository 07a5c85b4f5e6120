"""Recording FlashInfer Trace workloads while the engine serves (chapter 21).

`Recorder(dir)` receives every traced op call (runtime.py). For each it works out the Definition
(written once per name) and the call's variable axes. Calls are deduplicated by shape bucket
(each variable axis rounded up to a power of two) and at most `max_per_definition` are kept per
Definition; a kept call's inputs are copied to the host and saved as safetensors, so a workload
replays the exact bytes the engine saw. Weights and tables (embedding table, RoPE cos/sin, MoE
experts) are saved once and shared by every workload that reads them; KV pools are cut down to
the slots a call touches (ops.compact_slots). The folder is in the layout that
`flashinfer_bench.data.TraceSet.from_path` loads, and stays loadable after every workload:

    definitions/<op_type>/<name>.json
    workloads/<op_type>/<name>.jsonl
    blob/workloads/<op_type>/<name>/<name>_<uuid>.safetensors   (and <name>_shared_<n>...)
    blob/outputs/<op_type>/<name>/<name>_<uuid>.safetensors     what the engine computed

CUDA graphs (chapter 15): a replay runs no Python, so nothing inside a graph can be recorded.
Recording is paused while graphs are warmed up and captured (their batches are padding), and a
decode step whose batch-size bucket has not been recorded yet runs eagerly, once, instead of
replaying (`wants_eager`): the same kernels on the real batch, outside the graph.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import safetensors.torch
import torch
from flashinfer_bench.data import (
    Definition,
    SafetensorsInput,
    ScalarInput,
    Trace,
    Workload,
    save_json_file,
)

from minisgl.utils import init_logger

from .ops import Call, OpSpec, pow2_bucket

logger = init_logger(__name__)


@dataclass
class Pending:
    """A workload whose inputs are saved, waiting for the engine's outputs."""

    definition: Definition
    workload: Workload


def output_path(root: Path, definition: Definition, workload_uuid: str) -> Path:
    """Where the engine's outputs of a workload are (blob/outputs/..., as chapter 19's)."""
    name = definition.name
    return root / f"blob/outputs/{definition.op_type}/{name}/{name}_{workload_uuid}.safetensors"


def host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").contiguous()


class Recorder:
    def __init__(self, root: str | Path, max_per_definition: int = 8) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_per_definition = max_per_definition
        self.definitions: dict[str, Definition] = {}
        self.counts: dict[str, int] = {}
        self.seen: set[tuple] = set()
        self.shared: dict[tuple, tuple[str, str]] = {}  # (def, input, ptr, shape) -> (path, key)
        self.decode_buckets: set[int] = set()  # batch-size buckets of recorded decode steps
        self.calls = 0  # op calls seen (recorded or not)
        self.names_seen: set[str] = set()  # every Definition the engine ran
        # Definition -> shape bucket -> calls seen (recorded or not): how often each op ran, for
        # the per-op time breakdown of chapter 23. CUDA-graph replays run no Python: not counted.
        self.calls_by_bucket: dict[str, dict[int, int]] = {}

    # ------------------------------------------------------------------------------------------
    def prepare(self, spec: OpSpec, call: Call) -> Pending | None:
        """A call to keep (its inputs saved now, before the op runs), or None."""
        self.calls += 1
        name = spec.name(call)
        self.names_seen.add(name)
        axes = spec.axes(call)
        per_bucket = self.calls_by_bucket.setdefault(name, {})
        bucket = spec.bucket(axes)
        per_bucket[bucket] = per_bucket.get(bucket, 0) + 1
        if self.counts.get(name, 0) >= self.max_per_definition:
            return None
        key = (name, spec.dedup_key(axes))
        if key in self.seen:
            return None
        self.seen.add(key)
        definition = self.definitions.get(name)
        if definition is None:
            definition = self.definitions[name] = spec.definition(call)
            save_json_file(definition, self._path("definitions", definition, f"{name}.json"))
        workload = self._save_inputs(spec, definition, axes, spec.inputs(call))
        if spec.op == "attention" and not call.keep:
            self.decode_buckets.add(pow2_bucket(axes["batch_size"]))
        return Pending(definition, workload)

    def commit(self, pending: Pending, outputs: tuple) -> None:
        """Save what the engine computed, then list the workload."""
        definition, workload = pending.definition, pending.workload
        path, _ = self._blob(definition, workload.uuid, kind="outputs")
        safetensors.torch.save_file(
            {name: host(t) for name, t in zip(definition.outputs, outputs)}, str(path))
        line = Trace(definition=definition.name, workload=workload).model_dump_json()
        with open(self._path("workloads", definition, f"{definition.name}.jsonl"), "a") as f:
            f.write(line + "\n")
        self.counts[definition.name] = self.counts.get(definition.name, 0) + 1
        # A server's scheduler ends by SIGTERM and never reaches close(): the summary is kept
        # up to date with every workload listed (at most max_per_definition per Definition).
        self.write_summary()

    def wants_eager(self, batch_size: int) -> bool:
        """Should this decode step run eagerly (outside its CUDA graph) to be recorded?"""
        return pow2_bucket(batch_size) not in self.decode_buckets

    def summary(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))

    # ------------------------------------------------------------------------------------------
    def _path(self, kind: str, definition: Definition, filename: str) -> Path:
        path = self.root / kind / definition.op_type / filename
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def _blob(self, definition: Definition, stem: str, kind: str = "workloads"
              ) -> tuple[Path, str]:
        rel = f"blob/{kind}/{definition.op_type}/{definition.name}/{definition.name}_{stem}" \
              ".safetensors"
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        return path, rel

    def _save_inputs(self, spec: OpSpec, definition: Definition, axes: dict[str, int],
                     inputs: dict[str, Any]) -> Workload:
        workload_id = str(uuid.uuid4())
        specs: dict[str, Any] = {}
        own: dict[str, torch.Tensor] = {}
        for name, value in inputs.items():
            if not isinstance(value, torch.Tensor):
                specs[name] = ScalarInput(type="scalar", value=value)
            elif name in spec.shared_inputs:
                specs[name] = self._shared(definition, name, value)
            else:
                own[name] = host(value)
        if own:
            path, rel = self._blob(definition, workload_id)
            safetensors.torch.save_file(own, str(path))
            for name in own:
                specs[name] = SafetensorsInput(type="safetensors", path=rel, tensor_key=name)
        ordered = {name: specs[name] for name in definition.inputs}
        return Workload(axes=axes, inputs=ordered, uuid=workload_id)

    def _shared(self, definition: Definition, name: str, t: torch.Tensor) -> SafetensorsInput:
        key = (definition.name, name, t.data_ptr(), tuple(t.shape))
        if key not in self.shared:
            path, rel = self._blob(definition, f"shared_{len(self.shared)}")
            safetensors.torch.save_file({name: host(t)}, str(path))
            self.shared[key] = (rel, name)
        rel, tensor_key = self.shared[key]
        return SafetensorsInput(type="safetensors", path=rel, tensor_key=tensor_key)

    def write_summary(self) -> None:
        """capture.json: the calls seen so far and the workloads kept (written whole, then
        renamed, so a reader never sees half of it)."""
        tmp = self.root / "capture.json.tmp"
        tmp.write_text(json.dumps(
            {"op_calls_seen": self.calls, "workloads": self.summary(),
             "definitions_run": sorted(self.names_seen),
             "calls": {name: {str(b): n for b, n in sorted(buckets.items())}
                       for name, buckets in sorted(self.calls_by_bucket.items())}},
            indent=2) + "\n")
        tmp.replace(self.root / "capture.json")

    def close(self) -> None:
        self.write_summary()
        logger.info("trace capture: %d workloads of %d definitions in %s",
                    sum(self.counts.values()), len(self.counts), self.root)
