"""apply (chapter 22): run each op with the fastest solution that passed on its shape bucket.

`Applier.load(dir, device)` reads the Traces a benchmark wrote (bench.py). For every Definition
and every shape bucket (the op's batch-like axis rounded up to a power of two, ops.OpSpec.bucket)
it keeps the solutions whose every trace in that bucket is PASSED, and picks the one with the
lowest mean latency, unless the engine's own choice on this device (solutions.engine_default)
passed too and the fastest beats it by less than MIN_GAIN: then the engine's code runs as it is.
A solution with any failed trace in a bucket is never picked there; a bucket without a passing
solution, or a call whose Definition or bucket the traces never saw, runs the engine's default
code. The choices are logged once, when the engine starts.

Attention is chosen once per engine, not per call: the torch and Triton backends keep different
metadata for a whole batch. The traces of gqa_paged_decode (the step the engine repeats most)
pick the backend, prefill's when there is no decode trace, and only when --attn is auto.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean

import torch
from flashinfer_bench.data import EvaluationStatus, TraceSet

from minisgl.utils import init_logger

from .ops import Call, OpSpec, spec_for
from .solutions import ATTENTION_BACKEND, Impl, engine_default, find

logger = init_logger(__name__)

# A solution replaces the engine's default on a bucket only when it is faster by more than this.
# The benchmark times an op alone: a few microseconds, launch included, and on the H200 the same
# Triton kernel (fused add + RMSNorm) measured 4 us on one bucket and 38-49 us on its two
# neighbours (h200_stage5_rerun.txt). In the engine, under a CUDA graph, a swap can also add
# kernels that the lone timing does not charge (torch's store_kv is two index copies, the CUDA
# kernel one). That run picked torch's store_kv and SiLU-and-mul on small buckets, and batch-1
# decode with apply took 1.04 ms per token against the defaults' 1.01. A real gain between these
# kernels is a factor, not a few percent.
MIN_GAIN = 0.2


@dataclass(frozen=True)
class Choice:
    impl: Impl
    latency_ms: float
    speedup: float  # against the Definition's reference
    is_default: bool = False  # the engine's own code on this device: apply leaves the op alone


def pick(passed: list[Choice], default_suffix: str | None) -> Choice:
    """The fastest of the solutions that passed on a bucket, or the engine's default when it
    passed and the fastest wins by less than MIN_GAIN."""
    fastest = min(passed, key=lambda c: c.latency_ms)
    default = next((c for c in passed if c.impl.suffix == default_suffix), None)
    if default is not None and fastest.latency_ms > default.latency_ms * (1 - MIN_GAIN):
        fastest = default
    return replace(fastest, is_default=fastest.impl.suffix == default_suffix)


def best_per_bucket(trace_set: TraceSet, device: torch.device
                    ) -> dict[str, dict[int, Choice]]:
    """Definition name -> bucket -> pick() among the solutions that passed every workload
    there."""
    table: dict[str, dict[int, Choice]] = {}
    for name, definition in trace_set.definitions.items():
        spec = spec_for(definition)
        # (bucket, solution) -> its traces; a solution failing anywhere in a bucket is out
        groups: dict[tuple[int, str], list] = defaultdict(list)
        for trace in trace_set.traces.get(name, []):
            if trace.solution is None or trace.evaluation is None:
                continue
            groups[(spec.bucket(trace.workload.axes), trace.solution)].append(trace)
        passed: dict[int, list[Choice]] = defaultdict(list)
        for (bucket, solution), traces in sorted(groups.items()):
            if any(t.evaluation.status != EvaluationStatus.PASSED for t in traces):
                continue
            impl = find(spec.op, solution.removeprefix(f"{name}_"))
            if impl is None or not impl.available(device):
                continue
            latency = mean(t.evaluation.performance.latency_ms for t in traces)
            speedup = mean(t.evaluation.performance.speedup_factor for t in traces)
            passed[bucket].append(Choice(impl, latency, speedup))
        default = engine_default(spec.op, device)
        if passed:
            table[name] = {bucket: pick(cs, default) for bucket, cs in passed.items()}
    return table


class Applier:
    def __init__(self, table: dict[str, dict[int, Choice]], source: str) -> None:
        self.table = table
        self.source = source

    @classmethod
    def load(cls, path: str | Path, device: torch.device) -> Applier:
        trace_set = TraceSet.from_path(str(path))
        if not any(trace_set.traces.values()):
            raise ValueError(f"{path} holds no benchmark traces: run `python -m minisgl.trace "
                             f"bench {path}` first")
        applier = cls(best_per_bucket(trace_set, device), str(path))
        applier.log_choices()
        return applier

    @property
    def swapped_ops(self) -> frozenset[str]:
        """The ops (OPS keys) with a solution other than the engine's own on some bucket. Every
        other op runs as written, without even the lookup: on the H200 a set whose every choice
        was the default still cost 4% of the official workload's throughput in that lookup
        (prefill runs eagerly, a few hundred op calls per batch)."""
        return frozenset(c.impl.op for buckets in self.table.values() for c in buckets.values()
                         if not c.is_default and c.impl.op != "attention")

    def choose(self, spec: OpSpec, call: Call) -> Callable | None:
        if spec.op == "attention":
            return None  # chosen once per engine (attention_backend)
        buckets = self.table.get(spec.name(call))
        if buckets is None:
            return None
        choice = buckets.get(spec.bucket(spec.axes(call)))
        # the engine's own code, not the solution's wrapper: the wrapper converts to the op's
        # canonical arguments, which can cost a kernel the engine's call does not launch
        return choice.impl.fn if choice is not None and not choice.is_default else None

    def attention_backend(self, configured: str) -> str:
        """The backend the attention traces favour, when the engine was left to choose."""
        decode = {n: c for n, c in self.table.items() if n.startswith("gqa_paged_decode")}
        prefill = {n: c for n, c in self.table.items() if n.startswith("gqa_paged_prefill")}
        source = decode or prefill
        if configured != "auto" or not source:
            return configured
        votes: dict[str, float] = defaultdict(float)  # backend -> latency summed over buckets
        counts: dict[str, int] = defaultdict(int)
        for buckets in source.values():
            for choice in buckets.values():
                votes[choice.impl.suffix] += choice.latency_ms
                counts[choice.impl.suffix] += 1
        best = max(counts, key=lambda s: (counts[s], -votes[s]))  # wins most buckets
        backend = ATTENTION_BACKEND.get(best, configured)
        logger.info("apply: attention backend %s (fastest on %d of %d buckets of %s)", backend,
                    counts[best], sum(counts.values()), ", ".join(source))
        return backend

    def log_choices(self) -> None:
        lines = [f"apply: {len(self.table)} definitions from {self.source}"]
        for name, buckets in sorted(self.table.items()):
            picks = ", ".join(f"<={b}: {c.impl.suffix}{' (default)' if c.is_default else ''} "
                              f"{c.latency_ms:.4f} ms"
                              for b, c in sorted(buckets.items()))
            lines.append(f"  {name}: {picks}")
        swapped = ", ".join(sorted(self.swapped_ops)) or "none (the engine runs as it ships)"
        lines.append(f"  ops swapped somewhere: {swapped}")
        logger.info("\n".join(lines))
