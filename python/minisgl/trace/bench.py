"""The benchmark (chapter 22): every solution of every Definition on every captured workload.

For each workload the inputs are loaded (safetensors, on the chosen device) and the Definition's
reference `run()` gives the expected outputs. Each solution available on the device then runs
on the same inputs and gets an Evaluation, as FlashInfer-Bench grades them:

- RUNTIME_ERROR when it raises; INCORRECT_SHAPE / INCORRECT_DTYPE when an output has the wrong
  shape or dtype;
- INCORRECT_NUMERICAL when an output differs from the reference: bit for bit for ops that copy
  or pick tokens (store_kv, embedding, sampling), beyond |out - ref| <= atol + rtol * |ref|
  otherwise (ops.tolerance: 1e-2 in bf16/fp16 as the paper, 1e-5 in fp32);
- PASSED otherwise, with its latency, the reference's latency and the speedup (reference /
  solution).

Timing: `warmup` untimed calls, then `trials` x `iters` timed calls, the median reported. On a
GPU each call is timed with CUDA events and the L2 cache is flushed before it (a 256 MiB write),
so no call finds the previous one's data in cache; on a CPU, time.perf_counter.

The solutions are written to solutions/ (a Python entry that calls minisgl's function through
the Definition's inputs) and the evaluations to traces/<op_type>/<definition>.jsonl, replacing
the previous benchmark's.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

import torch
from flashinfer_bench.data import (
    BuildSpec,
    Correctness,
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    Performance,
    Solution,
    SourceFile,
    Trace,
    TraceSet,
    save_json_file,
    save_jsonl_file,
)

from minisgl.utils import init_logger

from .ops import OPS, OpSpec, spec_for, tolerance
from .replay import load_inputs, reference_fn
from .solutions import SOLUTIONS, Impl, find

logger = init_logger(__name__)


@dataclass
class BenchConfig:
    device: str = "auto"  # auto: cuda when there is one
    warmup: int = 2
    iters: int = 5
    trials: int = 3
    solutions: tuple[str, ...] = ()  # suffixes to run (torch, triton, cuda, ...); () = all
    definitions: tuple[str, ...] = ()  # names (or name prefixes) to run; () = all
    max_workloads: int = 0  # per definition, 0 = all

    def torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


# ----------------------------------------------------------------------------------------------
def as_tuple(out: Any) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def compare(spec: OpSpec, got: tuple, want: tuple) -> tuple[EvaluationStatus, Correctness | None]:
    if len(got) != len(want) or any(g.shape != w.shape for g, w in zip(got, want)):
        return EvaluationStatus.INCORRECT_SHAPE, None
    if any(g.dtype != w.dtype for g, w in zip(got, want)):
        return EvaluationStatus.INCORRECT_DTYPE, None
    max_abs = max_rel = 0.0
    ok = True
    for g, w in zip(got, want):
        tol = tolerance(spec, w.dtype)
        if tol is None:
            ok &= torch.equal(g, w)
            diff = (g.double() - w.double()).abs()
        else:
            atol, rtol = tol
            ok &= torch.allclose(g.float(), w.float(), atol=atol, rtol=rtol)
            diff = (g.double() - w.double()).abs()
        if diff.numel():
            finite = torch.nan_to_num(diff, nan=float("inf"))
            max_abs = max(max_abs, float(finite.max()))
            max_rel = max(max_rel, float((finite / (w.double().abs() + 1e-12)).max()))
    status = EvaluationStatus.PASSED if ok else EvaluationStatus.INCORRECT_NUMERICAL
    return status, Correctness(max_absolute_error=max_abs, max_relative_error=max_rel)


class Timer:
    """Median latency (ms) of fn(), with an L2 flush before each call on a GPU."""

    def __init__(self, device: torch.device, cfg: BenchConfig) -> None:
        self.device, self.cfg = device, cfg
        self.flush = (torch.empty(256 << 20, dtype=torch.uint8, device=device)
                      if device.type == "cuda" else None)

    def __call__(self, fn: Callable[[], Any]) -> float:
        for _ in range(self.cfg.warmup):
            fn()
        times: list[float] = []
        for _ in range(self.cfg.trials * self.cfg.iters):
            if self.flush is None:
                start = time.perf_counter()
                fn()
                times.append((time.perf_counter() - start) * 1e3)
                continue
            self.flush.zero_()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        return median(times)


def environment(device: torch.device) -> Environment:
    hardware = (torch.cuda.get_device_name(device).replace(" ", "_") if device.type == "cuda"
                else f"CPU_{platform.machine()}")
    libs = {"torch": torch.__version__}
    try:
        import triton

        import minisgl.kernel.triton  # noqa: F401  (first: it sets up the interpreter on a CPU)

        libs["triton"] = triton.__version__
    except ImportError:
        pass
    return Environment(hardware=hardware, libs=libs)


# ----------------------------------------------------------------------------------------------
SOLUTION_ENTRY = '''"""minisgl solution {name}: {description}.

Calls minisgl.trace.solutions ({op} / {suffix}) through the Definition's inputs: it needs the
minisgl package importable."""

from minisgl.trace.bench import run_solution

CONSTS = {consts!r}


def run({signature}):
    return run_solution("{op}", "{suffix}", CONSTS, {{{kwargs}}})
'''


def run_solution(op: str, suffix: str, consts: dict[str, int], inputs: dict[str, Any]) -> Any:
    """Call a registered solution on a Definition's inputs (the entry of a written Solution)."""
    impl = find(op, suffix)
    if impl is None:
        raise KeyError(f"no solution {suffix!r} registered for op {op!r}")
    out = OPS[op].run(impl.fn, inputs, consts)
    return out[0] if len(out) == 1 else out


def solution_record(definition: Definition, impl: Impl) -> Solution:
    name = f"{definition.name}_{impl.suffix}"
    source = SOLUTION_ENTRY.format(
        name=name, description=impl.description, op=impl.op, suffix=impl.suffix,
        consts=definition.const_axes, signature=", ".join(definition.inputs),
        kwargs=", ".join(f"{n!r}: {n}" for n in definition.inputs))
    return Solution(
        name=name, definition=definition.name, author="minisgl", description=impl.description,
        spec=BuildSpec(language="python", target_hardware=["cuda"] if impl.needs_cuda
                       else ["cpu", "cuda"], entry_point="main.py::run",
                       dependencies=["minisgl"], destination_passing_style=False),
        sources=[SourceFile(path="main.py", content=source)])


def evaluate(spec: OpSpec, definition: Definition, impl: Impl, inputs: dict[str, Any],
             want: tuple, ref_ms: float, timer: Timer, env: Environment) -> Evaluation:
    stamp = datetime.now(UTC).isoformat()
    run = lambda: spec.run(impl.fn, inputs, definition.const_axes)  # noqa: E731
    try:
        got = as_tuple(run())
        if timer.device.type == "cuda":
            torch.cuda.synchronize(timer.device)
    except Exception as e:  # a solution may fail in any way: that is its grade
        return Evaluation(status=EvaluationStatus.RUNTIME_ERROR, environment=env,
                          timestamp=stamp, log=f"{type(e).__name__}: {e}")
    status, correctness = compare(spec, got, want)
    if status != EvaluationStatus.PASSED:
        return Evaluation(status=status, environment=env, timestamp=stamp,
                          correctness=correctness, log="does not match the reference")
    ms = timer(run)
    return Evaluation(status=status, environment=env, timestamp=stamp, correctness=correctness,
                      performance=Performance(latency_ms=ms, reference_latency_ms=ref_ms,
                                              speedup_factor=ref_ms / ms if ms > 0 else 0.0))


def bench(root: str | Path, cfg: BenchConfig | None = None) -> dict[str, list[Trace]]:
    """Benchmark the set at `root`; returns and writes the Traces per Definition."""
    cfg = cfg or BenchConfig()
    root = Path(root)
    device = cfg.torch_device()
    trace_set = TraceSet.from_path(str(root))
    timer, env = Timer(device, cfg), environment(device)
    results: dict[str, list[Trace]] = {}
    for name, definition in sorted(trace_set.definitions.items()):
        if cfg.definitions and not any(name.startswith(d) for d in cfg.definitions):
            continue
        spec = spec_for(definition)
        impls = [i for i in SOLUTIONS.get(spec.op, []) if i.available(device)
                 and (not cfg.solutions or i.suffix in cfg.solutions)]
        for impl in impls:
            save_json_file(solution_record(definition, impl),
                           root / "solutions" / definition.op_type / name /
                           f"{name}_{impl.suffix}.json")
        reference = reference_fn(definition)
        workloads = trace_set.workloads.get(name, [])
        if cfg.max_workloads:
            workloads = workloads[: cfg.max_workloads]
        traces: list[Trace] = []
        cache: dict[str, dict[str, torch.Tensor]] = {}
        for wl in workloads:
            inputs = load_inputs(root, wl, device, cache)
            want = as_tuple(reference(**inputs))
            ref_ms = timer(lambda f=reference, kw=inputs: f(**kw))
            for impl in impls:
                evaluation = evaluate(spec, definition, impl, inputs, want, ref_ms, timer, env)
                traces.append(Trace(definition=name, workload=wl.workload,
                                    solution=f"{name}_{impl.suffix}", evaluation=evaluation))
        save_jsonl_file(traces, root / "traces" / definition.op_type / f"{name}.jsonl")
        results[name] = traces
        passed = sum(t.evaluation.status == EvaluationStatus.PASSED for t in traces)
        logger.info("bench %s: %d workloads x %d solutions, %d passed", name, len(workloads),
                    len(impls), passed)
    return results
