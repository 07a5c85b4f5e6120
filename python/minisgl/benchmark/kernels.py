"""Replay the chapter-19 FlashInfer Trace workloads on a GPU and time both solutions.

    python tools/emu_kernels.py --trace-dir DIR           # any machine: workloads + emulator traces
    python -m minisgl.benchmark.kernels DIR [--out OUT]   # a GPU: latency traces

For every workload in DIR (store_kv and embedding definitions) this runs the `<definition>_cuda`
solution (the custom kernels, through the op registry's dispatch, which takes the extension built
from csrc/ext.cu for GPU tensors) and the `<definition>_torch` solution (torch_ops.py, the engine's reference and
fallback) on the workload's own input bytes, checks each against the Definition's reference
run() byte for byte, times it with CUDA events (warm-up, then the median of --iters samples of
10 back-to-back runs on the same inputs: both ops are idempotent), and appends one Trace per
solution to traces/<op_type>/<definition>.jsonl with latency_ms, reference_latency_ms (the
torch_ops latency) and speedup_factor (reference / solution). With --out the set is copied to
OUT first and the traces go there.

It reads and writes the files with json alone (no pydantic, no flashinfer-bench), since GPU
machines may lack them; tests/test_ch19_kernels.py checks its traces against the schema.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import torch
from safetensors.torch import load_file

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32,
          "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
          "bool": torch.bool}
REPEAT = 10  # runs per timing sample
NO_CUDA = ("minisgl.benchmark.kernels: no CUDA device here (torch.cuda.is_available() is "
           "False): run it on a GPU machine")


# ---------------------------------------------------------------------------------------------
# Reading the set.
# ---------------------------------------------------------------------------------------------
def load_definitions(root: Path) -> dict[str, dict]:
    return {d["name"]: d for d in (json.loads(p.read_text()) for p in
                                   sorted((root / "definitions").rglob("*.json")))}


def load_solutions(root: Path) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for p in sorted((root / "solutions").rglob("*.json")):
        s = json.loads(p.read_text())
        out.setdefault(s["definition"], []).append(s)
    return out


def load_workloads(root: Path) -> list[dict]:
    """Workload traces (`{"definition": ..., "workload": {...}}`), in file order."""
    rows = []
    for p in sorted((root / "workloads").rglob("*.jsonl")):
        rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return rows


def load_inputs(root: Path, definition: dict, workload: dict, device: str) -> list:
    """The workload's inputs in the Definition's order: tensors on `device`, scalars as is."""
    files: dict[str, dict[str, torch.Tensor]] = {}
    values = []
    for name, spec in definition["inputs"].items():
        given = workload["inputs"][name]
        if given["type"] == "scalar":
            values.append(given["value"])
            continue
        if given["type"] != "safetensors":
            raise ValueError(f"{definition['name']}: input {name} is {given['type']}, not stored")
        if given["path"] not in files:
            files[given["path"]] = load_file(str(root / given["path"]))
        tensor = files[given["path"]][given["tensor_key"]]
        if tensor.dtype != DTYPES[spec["dtype"]]:
            raise ValueError(f"{definition['name']}: input {name} is {tensor.dtype}")
        values.append(tensor.to(device))
    return values


def reference_outputs(definition: dict, inputs: list) -> list[torch.Tensor]:
    namespace: dict = {}
    exec(compile(definition["reference"], f"<reference {definition['name']}>", "exec"), namespace)
    out = namespace["run"](*inputs)
    return list(out) if isinstance(out, tuple | list) else [out]


# ---------------------------------------------------------------------------------------------
# The two implementations of each op, as (prepare(inputs) -> (step, outputs)): `step` runs the op
# once; `outputs` are the tensors it writes. Index dtypes are converted once, outside the timing,
# to what each implementation takes (int32 for the kernel, int64 for torch's index_copy_).
# ---------------------------------------------------------------------------------------------
def _store_kv(impl: Callable, index_dtype: torch.dtype):
    def prepare(inputs: list):
        k_cache, v_cache, indices, k, v = inputs
        k_out, v_out = k_cache.clone(), v_cache.clone()
        idx = indices.to(index_dtype)
        return (lambda: impl(k_out, v_out, idx, k, v)), [k_out, v_out]

    return prepare


def _embedding(impl: Callable):
    def prepare(inputs: list):
        weight, ids, start = inputs
        result: list[torch.Tensor] = []

        def step():
            result[:] = [impl(weight, ids, start, weight.shape[0])]

        return step, result

    return prepare


def implementations(op_type: str) -> dict[str, Callable]:
    """By solution suffix (see tools/emu_trace.py): the CUDA kernels and the torch fallback."""
    from minisgl import ops

    if op_type == "store_kv":
        return {"cuda": _store_kv(ops.store_kv, torch.int32),
                "torch": _store_kv(ops.store_kv.implementation("torch"), torch.int64)}
    if op_type == "embedding":
        return {"cuda": _embedding(ops.embedding),
                "torch": _embedding(ops.embedding.implementation("torch"))}
    raise ValueError(f"no implementations of op_type {op_type!r}")


# ---------------------------------------------------------------------------------------------
# Measuring.
# ---------------------------------------------------------------------------------------------
def median_ms(step: Callable[[], None], warmup: int, iters: int) -> float:
    """Median over `iters` samples of the time per run of REPEAT back-to-back runs between two
    CUDA events: the queue stays full, so Python's launch cost is not counted as GPU time (as in
    benchmarks/gpu_kernels.py). Tiny workloads still pay each launch's fixed cost."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPEAT):
            step()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / REPEAT)
    return statistics.median(samples)


def compare(outputs: list[torch.Tensor], expected: list[torch.Tensor]) -> dict:
    """Bitwise equality, and the errors as flashinfer-bench reports them."""
    equal, max_abs, max_rel = len(outputs) == len(expected), 0.0, 0.0
    for got, want in zip(outputs, expected):
        same_shape = got.shape == want.shape and got.dtype == want.dtype
        equal = equal and same_shape and torch.equal(got.contiguous().view(torch.uint8),
                                                     want.contiguous().view(torch.uint8))
        if same_shape and want.numel():
            diff = (got.float() - want.float()).abs()
            max_abs = max(max_abs, diff.max().item())
            max_rel = max(max_rel, (diff / (want.float().abs() + 1e-8)).max().item())
    return {"max_relative_error": max_rel, "max_absolute_error": max_abs,
            "extra": {"bitwise_equal": equal}}


def environment() -> dict:
    return {"hardware": torch.cuda.get_device_name(),
            "libs": {"torch": torch.__version__, "cuda": str(torch.version.cuda)}}


def make_trace(definition: str, workload: dict, solution: str, env: dict, log: str,
               correctness: dict | None = None, latency_ms: float | None = None,
               reference_latency_ms: float | None = None, status: str | None = None) -> dict:
    """One Trace (FlashInfer Trace schema) as a JSON-ready dict. Without `status`: PASSED when the
    outputs were bitwise equal, else INCORRECT_NUMERICAL; other statuses carry only the log."""
    evaluation = {"status": status, "environment": env,
                  "timestamp": datetime.now(UTC).isoformat(), "log": log}
    if status is None:
        passed = correctness["extra"]["bitwise_equal"]
        evaluation["status"] = "PASSED" if passed else "INCORRECT_NUMERICAL"
        evaluation["correctness"] = correctness
        if passed:
            evaluation["performance"] = {
                "latency_ms": latency_ms, "reference_latency_ms": reference_latency_ms,
                "speedup_factor": reference_latency_ms / latency_ms if latency_ms > 0 else 0.0}
    return {"definition": definition, "workload": workload, "solution": solution,
            "evaluation": evaluation}


def bench_workload(root: Path, definition: dict, workload: dict, solutions: list[dict],
                   warmup: int, iters: int) -> list[dict]:
    from minisgl.kernel.cuda_ext import load_extension

    impls = implementations(definition["op_type"])
    if load_extension() is None:  # the ops would fall back to torch: nothing to time
        del impls["cuda"]
    inputs = load_inputs(root, definition, workload, "cuda")
    expected = reference_outputs(definition, inputs)
    measured: dict[str, tuple[float, dict]] = {}
    for kind, prepare in impls.items():
        step, outputs = prepare(inputs)
        step()
        torch.cuda.synchronize()
        measured[kind] = (median_ms(step, warmup, iters), compare(outputs, expected))

    env = environment()
    note = (f"median of {iters} CUDA-event samples of {REPEAT} back-to-back runs each, after "
            f"{warmup} warm-up runs; reference_latency_ms is the torch solution's (torch_ops, "
            "the engine's fallback)")
    traces = []
    for solution in solutions:
        kind = solution["name"].rsplit("_", 1)[-1]
        if kind == "cuda" and kind not in measured:
            traces.append(make_trace(definition["name"], workload, solution["name"], env,
                                     "the CUDA extension (csrc/ext.cu) did not build here",
                                     status="COMPILE_ERROR"))
        elif kind in measured:
            latency, correctness = measured[kind]
            traces.append(make_trace(definition["name"], workload, solution["name"], env, note,
                                     correctness, latency, measured["torch"][0]))
    return traces


def append_traces(root: Path, op_type: str, definition: str, traces: list[dict]) -> Path:
    path = root / "traces" / op_type / f"{definition}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(t) + "\n" for t in traces)
    return path


def copy_set(src: Path, dst: Path) -> None:
    for sub in ("definitions", "solutions", "workloads", "blob"):
        if (src / sub).is_dir():
            shutil.copytree(src / sub, dst / sub, dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m minisgl.benchmark.kernels", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path, help="a trace set from tools/emu_kernels.py --trace-dir")
    parser.add_argument("--out", type=Path, default=None, help="write the traces to a copy here")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs first (default 20)")
    parser.add_argument("--iters", type=int, default=100, help="timing samples (default 100)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(NO_CUDA, file=sys.stderr)
        return 2
    definitions = load_definitions(args.dir)
    workloads = load_workloads(args.dir)
    if not workloads:
        print(f"minisgl.benchmark.kernels: no workloads in {args.dir}", file=sys.stderr)
        return 1
    out = args.out or args.dir
    if out.resolve() != args.dir.resolve():
        copy_set(args.dir, out)
    solutions = load_solutions(args.dir)
    failed = 0
    for row in workloads:
        definition = definitions[row["definition"]]
        traces = bench_workload(args.dir, definition, row["workload"],
                                solutions.get(definition["name"], []), args.warmup, args.iters)
        append_traces(out, definition["op_type"], definition["name"], traces)
        for t in traces:
            ev = t["evaluation"]
            perf = ev.get("performance")
            timing = (f"{perf['latency_ms'] * 1000:.2f} us, {perf['speedup_factor']:.2f}x torch"
                      if perf else "")
            print(f"{t['solution']} [{row['workload']['uuid'][:8]}]: {ev['status']} {timing}")
            failed += ev["status"] != "PASSED"
    print(f"traces appended under {out / 'traces'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
