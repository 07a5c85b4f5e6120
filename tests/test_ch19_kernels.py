"""Chapter 19: the custom CUDA kernels (kv_kernels.cuh, ext.cu) and how they are checked without a
GPU: two nvcc versions compile them, the CPU emulator runs their self-test, the op registry takes
them for GPU tensors when the extension builds and falls back to torch_ops otherwise, and the
emulator's FlashInfer Trace set replays the kernels on fixed
inputs that the Definitions' reference run() must reproduce byte for byte. On a GPU the extension
is compared with torch_ops directly (the `gpu` test).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import check  # noqa: E402

from minisgl import ops  # noqa: E402
from minisgl.kernel import torch_ops  # noqa: E402
from minisgl.ops import cuda_impls  # noqa: E402


def test_cuda_kernels_on_cpu_emulator():
    """CUDA kernel 的自检程序在 CPU 模拟器上运行（没有 GPU 也能逐字节验证 kernel 逻辑）。"""
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "emu_kernels.py")],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("PASS") == 4


@pytest.mark.slow
def test_two_nvcc_versions_compile_both_files():
    """tools/check.py finds two toolkits (installing nvcc 13.4 from PyPI on a fresh machine) and
    both compile the self-test and the torch extension."""
    if len(check.find_toolkits()) < 2:
        subprocess.run([sys.executable, str(ROOT / "tools" / "check.py"), "--install"],
                       check=True, timeout=1800)
    toolkits = check.find_toolkits()
    assert len({t.version for t in toolkits}) >= 2, toolkits
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "check.py")],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stdout + r.stderr
    for toolkit in toolkits:
        for source in check.SOURCES:
            assert f"nvcc {toolkit.version}: {source} 编译 通过" in r.stdout, r.stdout


# tools/check.py without two toolkits says so before it compiles anything: a compile of ext.cu
# takes minutes, and its verdict could not pass the check.
FAKE_NVCC = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.48"; exit 0; fi
echo "$@" >> "$NVCC_CALLS"
exit 0
"""


def test_one_toolkit_is_reported_before_any_compile(tmp_path):
    """The learner's case: one nvcc on PATH, nothing installed yet."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvcc").write_text(FAKE_NVCC)
    (bin_dir / "nvcc").chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    env.update(PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", NVCC_CALLS=str(calls),
               MINISGL_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "check.py")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    assert not calls.exists(), calls.read_text()  # nvcc ran for --version only
    assert "只找到 1 个" in r.stdout and "python tools/check.py --install" in r.stdout
    assert "编译 " not in r.stdout, r.stdout


def _one_toolkit(version: str = "13.0") -> list:
    return [check.Toolkit(version, version + ".48", Path("/nowhere/nvcc"))]


@pytest.mark.parametrize("toolkits, argv", [
    (_one_toolkit(), ["--force"]),  # even when told to redo every compile
    ([], []),  # no toolkit at all
    (_one_toolkit("12.8"), ["--jobs", "1"]),
])
def test_too_few_toolkits_compile_nothing(toolkits, argv, monkeypatch, capsys):
    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although the toolkits cannot pass the check")

    monkeypatch.setattr(check, "find_toolkits", lambda: toolkits)
    monkeypatch.setattr(check, "compile_all", no_compile)
    monkeypatch.setattr(check, "torch_flags", no_compile)
    assert check.main(argv) == 1
    out = capsys.readouterr().out
    assert f"只找到 {len(toolkits)} 个" in out and "--install" in out


# ---------------------------------------------------------------------------------------------
# Dispatch: the registry's rule takes the CUDA kernels for GPU tensors when the extension builds;
# CPU tensors always take the torch implementation.
# ---------------------------------------------------------------------------------------------
class OnGpu:
    """Stands in for a GPU tensor where only the rule looks at it (it is never computed on)."""

    is_cuda = True


def test_a_gpu_tensor_takes_the_cuda_kernels_when_the_extension_builds(monkeypatch):
    cpu = torch.zeros(2, 3)
    monkeypatch.setattr(cuda_impls, "load_extension", lambda: object())  # "it built"
    for op in (ops.store_kv, ops.embedding):
        assert op.kind_for(OnGpu()) == "cuda", op.name
        assert op.pick(OnGpu()) is op.implementation("cuda")
        assert op.kind_for(cpu) == "torch", op.name  # even with the extension
    monkeypatch.setattr(cuda_impls, "load_extension", lambda: None)  # no nvcc, a compile error
    assert ops.store_kv.kind_for(OnGpu()) == ops.embedding.kind_for(OnGpu()) == "torch"
    with pytest.raises(RuntimeError, match="not available"):
        ops.store_kv.implementation("cuda")(cpu, cpu, torch.zeros(1), cpu, cpu)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_store_cache_falls_back_to_torch_ops_on_cpu(dtype):
    gen = torch.Generator().manual_seed(19)
    slots, n, heads, dim = 50, 13, 2, 24
    k_cache = torch.randn(slots, heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(slots, heads, dim, generator=gen).to(dtype)
    k, v = (torch.randn(n, heads, dim, generator=gen).to(dtype) for _ in range(2))
    indices = torch.randperm(slots, generator=gen)[:n]
    got_k, got_v = k_cache.clone(), v_cache.clone()
    ops.store_kv(got_k, got_v, indices, k, v)
    want_k, want_v = k_cache.clone(), v_cache.clone()
    torch_ops.store_cache(want_k, want_v, indices, k, v)
    assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
    assert torch.equal(got_k[indices], k) and torch.equal(got_v[indices], v)


@pytest.mark.parametrize("start,length", [(0, 40), (25, 15)])
def test_indexing_falls_back_to_torch_ops_on_cpu(start, length):
    gen = torch.Generator().manual_seed(start)
    weight = torch.randn(length, 16, generator=gen).to(torch.bfloat16)
    ids = torch.randint(0, 40, (3, 7), generator=gen)
    got = ops.embedding(weight, ids, start, length)
    assert torch.equal(got, torch_ops.indexing(weight, ids, start, length))
    owned = (ids >= start) & (ids < start + length)
    assert torch.equal(got[owned], weight[ids[owned] - start])
    assert not got[~owned].any()


@pytest.mark.gpu
def test_extension_matches_torch_ops_byte_for_byte_on_gpu():
    """Every copy width the binding picks (16, 4, 2 and 1 bytes), strided K/V views into a fused
    qkv tensor, and embedding rows short and long enough to be split across warps."""
    from minisgl.kernel.cuda_ext import load_extension

    assert load_extension() is not None, "the CUDA extension did not build"
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape, dtype):
        if dtype.is_floating_point:
            return torch.randn(*shape, generator=gen, device="cuda").to(dtype)
        return torch.randint(-100, 100, shape, generator=gen, device="cuda").to(dtype)

    def same(a, b):
        return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))

    for dtype, heads, dim in [(torch.bfloat16, 8, 128), (torch.float16, 1, 3),
                              (torch.float32, 1, 3), (torch.int8, 1, 5), (torch.bfloat16, 2, 64)]:
        for n in (1, 37, 300):
            slots = 512
            k_cache = rand(slots, heads, dim, dtype=dtype)
            v_cache = rand(slots, heads, dim, dtype=dtype)
            qkv = rand(n, 3, heads, dim, dtype=dtype)  # k and v are strided views of it
            k, v = qkv[:, 1], qkv[:, 2]
            indices = torch.randperm(slots, generator=gen, device="cuda")[:n]
            got_k, got_v = k_cache.clone(), v_cache.clone()
            ops.store_kv(got_k, got_v, indices, k, v)
            want_k, want_v = k_cache.clone(), v_cache.clone()
            torch_ops.store_cache(want_k, want_v, indices, k, v)
            assert same(got_k, want_k) and same(got_v, want_v), (dtype, heads, dim, n)

    for hidden in (64, 1024, 2048, 4096, 8192):
        for start, length in [(0, 1000), (500, 250)]:
            weight = rand(length, hidden, dtype=torch.bfloat16)
            ids = torch.randint(0, 1000, (41,), generator=gen, device="cuda")
            got = ops.embedding(weight, ids, start, length)
            assert same(got, torch_ops.indexing(weight, ids, start, length)), (hidden, start)


# ---------------------------------------------------------------------------------------------
# The FlashInfer Trace set written by the emulator (tools/emu_trace.py).
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trace_set")
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "emu_kernels.py"), "--trace-dir",
                        str(out)], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("PASS") == 4
    return out


def _report_calls() -> list[tuple[str, str, list[int]]]:
    """(label, test function, arguments) of each report(...) line in the self-test's main()."""
    src = (ROOT / check.SELF_TEST).read_text()
    calls = re.findall(r'report\("([^"]+)",\s*(test_\w+)(?:<\w+>)?\(([^)]*)\)\)', src)
    return [(label, fn, [int(eval(a, {})) for a in args.split(",")]) for label, fn, args in calls]


def test_trace_cases_mirror_the_self_test():
    import emu_trace

    calls = _report_calls()
    cases = emu_trace.CASES["test_kv_kernels.cu"]
    assert [label for label, _, _ in calls] == [case.label for case in cases]
    for (_, fn, args), case in zip(calls, cases, strict=True):
        if fn == "test_store":
            assert args == [case.slots, case.tokens, case.row_bytes], case
        else:
            assert args == [case.vocab, case.start, case.length, case.tokens, case.hidden], case


def test_trace_set_loads_with_flashinfer_bench(trace_dir):
    from flashinfer_bench.data import EvaluationStatus, TraceSet

    ts = TraceSet.from_path(str(trace_dir))
    assert sorted(d.op_type for d in ts.definitions.values()) == [
        "embedding", "embedding", "store_kv", "store_kv"]
    assert sum(len(w) for w in ts.workloads.values()) == 4
    for name, definition in ts.definitions.items():
        assert sorted(s.name for s in ts.solutions[name]) == [f"{name}_cuda", f"{name}_torch"]
        for workload_trace in ts.workloads[name]:
            workload = workload_trace.workload
            shapes = dict(zip(definition.inputs, definition.get_input_shapes(workload.axes)))
            for input_name, spec in workload.inputs.items():
                if spec.type == "safetensors":
                    tensor = ts.get_workload_blob_tensor(spec.path)[spec.tensor_key]
                    assert list(tensor.shape) == shapes[input_name]
        traces = ts.traces[name]
        assert {t.solution for t in traces} == {f"{name}_cuda", f"{name}_torch"}
        for t in traces:
            assert t.evaluation.status == EvaluationStatus.PASSED, t.evaluation.log
            assert t.evaluation.correctness.extra["bitwise_equal"]
        emulated = [t for t in traces if t.evaluation.environment.hardware == "cpu_emulator"]
        assert [t.solution for t in emulated] == [f"{name}_cuda"] * len(ts.workloads[name])


def _inputs(ts, definition, workload) -> list:
    values = []
    for name in definition.inputs:
        spec = workload.inputs[name]
        if spec.type == "scalar":
            values.append(spec.value)
        else:
            values.append(ts.get_workload_blob_tensor(spec.path)[spec.tensor_key])
    return values


def test_reference_reproduces_the_emulated_kernel_outputs(trace_dir):
    """Each Definition's reference run(), executed from its source text, gives exactly the bytes
    the CUDA kernel wrote on the emulator, for every workload."""
    from flashinfer_bench.data import TraceSet

    ts = TraceSet.from_path(str(trace_dir))
    checked = 0
    for name, definition in ts.definitions.items():
        namespace: dict = {}
        exec(definition.reference, namespace)
        for t in ts.traces[name]:
            if t.evaluation.environment.hardware != "cpu_emulator":
                continue
            out = namespace["run"](*_inputs(ts, definition, t.workload))
            out = out if isinstance(out, tuple) else (out,)
            emulated = ts.get_workload_blob_tensor(t.evaluation.correctness.extra["outputs"])
            assert list(emulated) == list(definition.outputs)
            for output_name, got in zip(definition.outputs, out, strict=True):
                want = emulated[output_name]
                assert got.dtype == want.dtype and got.shape == want.shape
                assert got.view(torch.uint8).numpy().tobytes() == want.view(
                    torch.uint8).numpy().tobytes(), (name, output_name)
            checked += 1
    assert checked == 4


def test_bench_without_cuda_says_so(trace_dir):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the bench runs for real there")
    r = subprocess.run([sys.executable, "-m", "minisgl.benchmark.kernels", str(trace_dir)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = (r.stdout + r.stderr).strip().splitlines()
    assert len(lines) == 1 and "no CUDA device" in lines[0]


def test_bench_traces_fit_the_schema(trace_dir, tmp_path, monkeypatch):
    """The bench's plumbing on CPU, with the GPU parts stubbed out (a fixed timer, inputs kept on
    the CPU, torch_ops standing in for the kernels): its traces must load with flashinfer-bench."""
    from flashinfer_bench.data import EvaluationStatus, TraceSet

    from minisgl.benchmark import kernels as bench
    from minisgl.kernel import cuda_ext

    load_inputs, implementations = bench.load_inputs, bench.implementations
    monkeypatch.setattr(bench, "implementations",
                        lambda op: dict.fromkeys(("cuda", "torch"), implementations(op)["torch"]))
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(cuda_ext, "load_extension", lambda: object())
    monkeypatch.setattr(bench, "load_inputs", lambda r, d, w, device: load_inputs(r, d, w, "cpu"))
    monkeypatch.setattr(bench, "median_ms", lambda step, warmup, iters: (step(), 0.25)[1])
    monkeypatch.setattr(bench, "environment", lambda: {"hardware": "stub", "libs": {}})
    out = tmp_path / "bench"
    assert bench.main([str(trace_dir), "--out", str(out)]) == 0

    ts = TraceSet.from_path(str(out))
    assert len(ts.definitions) == 4 and sum(len(w) for w in ts.workloads.values()) == 4
    traces = [t for ts_traces in ts.traces.values() for t in ts_traces]
    assert len(traces) == 8
    for t in traces:
        assert t.evaluation.status == EvaluationStatus.PASSED
        perf = t.evaluation.performance
        assert (perf.latency_ms, perf.reference_latency_ms, perf.speedup_factor) == (0.25, 0.25, 1)
    # The source set keeps only the emulator's traces.
    for path in (trace_dir / "traces").rglob("*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        assert {row["evaluation"]["environment"]["hardware"] for row in rows} == {"cpu_emulator",
                                                                                  "cpu"}
