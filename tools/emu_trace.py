"""FlashInfer Trace workloads and traces for the chapter-19 kernels, made on the CPU emulator.

    python tools/emu_kernels.py --trace-dir DIR [FILES]

For every self-test case of tests/cuda/test_kv_kernels.cu (CASES below mirrors its main()) this
writes, in the layout that `flashinfer_bench.data.TraceSet.from_path(DIR)` loads (<def> is a
Definition's name, <op> its op_type):

    definitions/<op>/<def>.json             store_kv / embedding, each with a torch reference run()
    solutions/<op>/<def>/<def>_cuda.json    kv_kernels.cuh + ext.cu + a Python entry point
    solutions/<op>/<def>/<def>_torch.json   torch_ops.py + a Python entry point
    workloads/<op>/<def>.jsonl              one Workload per case: axes bound, inputs stored in
    blob/workloads/<op>/<def>/<def>_<uuid>.safetensors
    blob/outputs/<op>/<def>/<def>_<uuid>.safetensors   what the kernel wrote on the emulator
    traces/<op>/<def>.jsonl                 evaluations: CUDA on the emulator, torch on the CPU

The inputs come from torch with a fixed seed per case (not from the C++ program's own generator),
so the same bytes replay on a GPU (`python -m minisgl.benchmark.kernels DIR`). The CUDA kernel runs
on exactly those bytes: for each workload a small CUDA program is generated that reads them from
files, launches the kernel as ext.cu does (the copy unit as ext.cu picks it; threads per block,
warps per token and row splits copied from ext.cu's source text, so the programs follow the binding
when it changes) and writes the results back; the emulator compiles and runs it. Each result is
compared with the Definition's reference run() byte for byte. The emulator says nothing about
speed, so the latency fields of its traces are 0 and the log says so; the GPU benchmark writes real
ones.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import sys
import tempfile
import uuid
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import emu_runner
import safetensors.torch
import torch
from flashinfer_bench.data import (
    AxisConst,
    AxisVar,
    BuildSpec,
    Correctness,
    Definition,
    Environment,
    Evaluation,
    EvaluationStatus,
    Performance,
    SafetensorsInput,
    ScalarInput,
    Solution,
    SourceFile,
    TensorSpec,
    Trace,
    Workload,
    save_json_file,
    save_jsonl_file,
)

CSRC_DIR = emu_runner.CSRC_DIR
TORCH_OPS = CSRC_DIR.parent / "torch_ops.py"
WORKLOAD_NAMESPACE = uuid.UUID("6d696e69-7367-6c2d-6368-313900000000")  # "minisgl-ch19"
EMULATOR_NOTE = ("Evaluated on the minisgl CPU emulator (tools/emu_kernels.py), which checks "
                 "results, not speed: the latency fields are 0. "
                 "`python -m minisgl.benchmark.kernels` measures them on a GPU.")
CPU_NOTE = ("Evaluated with torch on the CPU for correctness only: the latency fields are 0. "
            "`python -m minisgl.benchmark.kernels` measures them on a GPU.")

STORE_KV_REFERENCE = '''import torch


def run(k_cache, v_cache, indices, k, v):
    """The pool after writing token i's K and V rows into slot indices[i] (distinct slots)."""
    k_cache_out = k_cache.clone()
    v_cache_out = v_cache.clone()
    k_cache_out[indices.long()] = k
    v_cache_out[indices.long()] = v
    return k_cache_out, v_cache_out
'''

EMBEDDING_REFERENCE = '''import torch


def run(weight, ids, start):
    """Row ids[t] - start of this shard's table for ids in [start, start + vocab_shard), else 0."""
    local = ids.long() - start
    owned = (local >= 0) & (local < weight.shape[0])
    out = torch.zeros(ids.shape[0], weight.shape[1], dtype=weight.dtype, device=weight.device)
    out[owned] = weight[local[owned]]
    return out
'''

# The Python entries of the two solutions. The CUDA one builds the engine's extension (ext.cu
# with kv_kernels.cuh, the same files as python/minisgl/kernel/csrc/) on first use.
CUDA_ENTRY_COMMON = '''"""minisgl's CUDA kernels (kv_kernels.cuh) through the engine's torch
extension (ext.cu), built just in time on first use, as minisgl.kernel.cuda_ext does."""

from functools import cache
from pathlib import Path

import torch


@cache
def _extension():
    from torch.utils.cpp_extension import load

    here = Path(__file__).resolve().parent
    return load(name="minisgl_kernels", sources=[str(here / "ext.cu")],
                extra_include_paths=[str(here)], extra_cuda_cflags=["-O3", "-std=c++17"])
'''

CUDA_ENTRY = {
    "store_kv": CUDA_ENTRY_COMMON + '''

def run(k_cache, v_cache, indices, k, v):
    k_cache_out, v_cache_out = k_cache.clone(), v_cache.clone()
    n = k.shape[0]
    _extension().store_kv(k_cache_out.view(k_cache_out.shape[0], -1),
                          v_cache_out.view(v_cache_out.shape[0], -1), indices.int(),
                          k.reshape(n, -1), v.reshape(n, -1),
                          torch.cuda.current_stream().cuda_stream)
    return k_cache_out, v_cache_out
''',
    "embedding": CUDA_ENTRY_COMMON + '''

def run(weight, ids, start):
    return _extension().indexing(weight, ids.int(), start, weight.shape[0],
                                 torch.cuda.current_stream().cuda_stream)
''',
}

TORCH_ENTRY = {
    "store_kv": '''"""minisgl's torch implementation (torch_ops.py): the engine's fallback."""

from .torch_ops import store_cache


def run(k_cache, v_cache, indices, k, v):
    k_cache_out, v_cache_out = k_cache.clone(), v_cache.clone()
    store_cache(k_cache_out, v_cache_out, indices.long(), k, v)
    return k_cache_out, v_cache_out
''',
    "embedding": '''"""minisgl's torch implementation (torch_ops.py): the engine's fallback."""

from .torch_ops import indexing


def run(weight, ids, start):
    return indexing(weight, ids, start, weight.shape[0])
''',
}


# ---------------------------------------------------------------------------------------------
# The generated driver programs: shared I/O helpers, then one main() per kernel.
# ---------------------------------------------------------------------------------------------
DRIVER_PRELUDE = r"""// Generated by tools/emu_trace.py: replays one FlashInfer Trace workload
// ({workload} of {definition}) on the CPU emulator.
// Inputs are read from, outputs written to $MINISGL_TRACE_IO/<name>.bin (raw bytes).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kv_kernels.cuh"

#define CUDA_OK(call)                                                             \
  do {{                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {{                                                    \
      printf("CUDA error at line %d: %s\n", __LINE__, cudaGetErrorString(err_)); \
      exit(1);                                                                    \
    }}                                                                             \
  }} while (0)

static std::string io_path(const char* name) {{
  const char* dir = getenv("MINISGL_TRACE_IO");
  return std::string(dir ? dir : ".") + "/" + name + ".bin";
}}

// A device buffer holding the file's bytes (exactly `bytes` of them).
static void* load(const char* name, size_t bytes) {{
  std::vector<unsigned char> host(bytes);
  FILE* f = fopen(io_path(name).c_str(), "rb");
  if (!f || fread(host.data(), 1, bytes, f) != bytes || fgetc(f) != EOF) {{
    printf("cannot read %zu bytes from %s\n", bytes, io_path(name).c_str());
    exit(1);
  }}
  fclose(f);
  void* device = nullptr;
  CUDA_OK(cudaMalloc(&device, bytes));
  CUDA_OK(cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice));
  return device;
}}

static void save(const char* name, const void* device, size_t bytes) {{
  std::vector<unsigned char> host(bytes);
  CUDA_OK(cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost));
  FILE* f = fopen(io_path(name).c_str(), "wb");
  if (!f || fwrite(host.data(), 1, bytes, f) != bytes || fclose(f) != 0) {{
    printf("cannot write %s\n", io_path(name).c_str());
    exit(1);
  }}
}}

{threads_line}  // from ext.cu

static int blocks_for(int64_t warps) {{
  return static_cast<int>((warps * minisgl::kWarpSize + kThreadsPerBlock - 1) / kThreadsPerBlock);
}}
"""

STORE_KV_MAIN = r"""
int main() {{
  const int64_t slots = {slots}, n = {tokens}, row_bytes = {row_bytes};
  using V = {vector};  // the copy unit ext.cu picks for these rows
  const int64_t row = row_bytes / static_cast<int64_t>(sizeof(V));
  V* k_cache = static_cast<V*>(load("k_cache", slots * row_bytes));
  V* v_cache = static_cast<V*>(load("v_cache", slots * row_bytes));
  int32_t* indices = static_cast<int32_t*>(load("indices", n * sizeof(int32_t)));
  V* k = static_cast<V*>(load("k", n * row_bytes));
  V* v = static_cast<V*>(load("v", n * row_bytes));
  minisgl::store_kv_kernel<V><<<blocks_for({warps}), kThreadsPerBlock>>>(k_cache, v_cache, indices,
                                                                       k, v, n, row, row, row, row);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  save("k_cache_out", k_cache, slots * row_bytes);
  save("v_cache_out", v_cache, slots * row_bytes);
  return 0;
}}
"""

EMBEDDING_MAIN = r"""
int main() {{
  const int64_t length = {length}, n = {tokens}, row_bytes = {row_bytes}, start = {start};
  {splits_line}  // from ext.cu
  using V = {vector};
  const int64_t row = row_bytes / static_cast<int64_t>(sizeof(V));
  V* weight = static_cast<V*>(load("weight", length * row_bytes));
  int32_t* ids = static_cast<int32_t*>(load("ids", n * sizeof(int32_t)));
  V* out = nullptr;
  CUDA_OK(cudaMalloc(&out, n * row_bytes));
  CUDA_OK(cudaMemset(out, 0xff, n * row_bytes));  // poisoned: every byte must be written
  minisgl::embedding_kernel<V><<<blocks_for({warps}), kThreadsPerBlock>>>(out, weight, ids, n, row,
                                                                        start, length, splits);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  save("out", out, n * row_bytes);
  return 0;
}}
"""

VECTOR_TYPES = {16: "uint4", 4: "uint32_t", 2: "uint16_t", 1: "uint8_t"}


def copy_unit(row_bytes: int) -> int:
    """ext.cu's vector_bytes() for contiguous rows whose buffers are multiples of the row size
    (the emulator's cudaMalloc ends each buffer at a page boundary, so that keeps them aligned)."""
    return next(b for b in (16, 4, 2, 1) if row_bytes % b == 0)


@dataclass(frozen=True)
class Launch:
    """How ext.cu launches the kernels, read from its source so that the drivers follow it."""

    threads_line: str  # `constexpr int kThreadsPerBlock = ...;`
    store_warps: str  # warps of a store_kv launch, a C++ expression in n
    splits_line: str  # `const int splits = ...;`, warps per embedding row, in row_bytes
    embedding_warps: str  # warps of an embedding launch, in n and splits


def read_launch(ext: Path = CSRC_DIR / "ext.cu") -> Launch:
    text = ext.read_text(encoding="utf-8")

    def find(pattern: str, what: str) -> str:
        m = re.search(pattern, text)
        if m is None:
            raise RuntimeError(f"emu_trace: cannot find {what} in {ext}; update tools/emu_trace.py")
        return m.group(1).strip()

    return Launch(
        threads_line=find(r"(constexpr int kThreadsPerBlock = \d+;)", "kThreadsPerBlock"),
        store_warps=find(r"store_kv_kernel<V><<<\s*blocks_for\(([^()]*)\)", "the store_kv launch"),
        splits_line=find(r"(const int splits = [^;]+;)", "the embedding row splits"),
        embedding_warps=find(r"embedding_kernel<V><<<\s*blocks_for\(([^()]*)\)",
                             "the embedding launch"),
    )


# ---------------------------------------------------------------------------------------------
# The cases, one per report(...) line of tests/cuda/test_kv_kernels.cu's main().
# ---------------------------------------------------------------------------------------------
DTYPE = torch.bfloat16  # both kernels move bf16 rows in these cases, as in the engine


@dataclass(frozen=True)
class StoreKVCase:
    """test_store(slots, n, row_bytes): n new tokens go to distinct slots of a pool of `slots`."""

    label: str
    slots: int
    tokens: int
    heads: int
    head_dim: int
    op_type = "store_kv"

    @property
    def row_bytes(self) -> int:
        return self.heads * self.head_dim * DTYPE.itemsize

    def definition(self) -> Definition:
        row = ["num_slots", "num_kv_heads", "head_dim"]
        new = ["num_tokens", "num_kv_heads", "head_dim"]
        qwen3 = ["model:qwen3-0.6b"] if (self.heads, self.head_dim) == (8, 128) else []
        return Definition(
            name=f"minisgl_store_kv_bf16_h{self.heads}_d{self.head_dim}",
            op_type=self.op_type,
            description=("Write the new tokens' K and V rows into the paged KV pool: "
                         "k_cache[indices[i]] = k[i], v_cache[indices[i]] = v[i]. The engine "
                         "updates the pool in place (minisgl.kernel.store_cache); here the updated "
                         "pool is the output."),
            tags=["minisgl", "chapter:19", "status:verified", *qwen3],
            axes={
                "num_slots": AxisVar(type="var", description="rows (token slots) in the KV pool"),
                "num_tokens": AxisVar(type="var",
                                      description="new tokens whose K and V are written"),
                "num_kv_heads": AxisConst(type="const", value=self.heads),
                "head_dim": AxisConst(type="const", value=self.head_dim),
            },
            constraints=["num_tokens <= num_slots"],
            inputs={
                "k_cache": TensorSpec(shape=row, dtype="bfloat16", description="K pool before"),
                "v_cache": TensorSpec(shape=row, dtype="bfloat16", description="V pool before"),
                "indices": TensorSpec(shape=["num_tokens"], dtype="int32",
                                      description="distinct slot of each new token"),
                "k": TensorSpec(shape=new, dtype="bfloat16"),
                "v": TensorSpec(shape=new, dtype="bfloat16"),
            },
            outputs={
                "k_cache_out": TensorSpec(shape=row, dtype="bfloat16", description="K pool after"),
                "v_cache_out": TensorSpec(shape=row, dtype="bfloat16", description="V pool after"),
            },
            reference=STORE_KV_REFERENCE,
        )

    def make_inputs(self, gen: torch.Generator) -> dict[str, torch.Tensor | int]:
        pool = (self.slots, self.heads, self.head_dim)
        new = (self.tokens, self.heads, self.head_dim)
        return {
            "k_cache": torch.randn(pool, generator=gen).to(DTYPE),
            "v_cache": torch.randn(pool, generator=gen).to(DTYPE),
            "indices": torch.randperm(self.slots, generator=gen)[: self.tokens].int(),
            "k": torch.randn(new, generator=gen).to(DTYPE),
            "v": torch.randn(new, generator=gen).to(DTYPE),
        }

    def driver_main(self, launch: Launch) -> str:
        return STORE_KV_MAIN.format(slots=self.slots, tokens=self.tokens, row_bytes=self.row_bytes,
                                    vector=VECTOR_TYPES[copy_unit(self.row_bytes)],
                                    warps=launch.store_warps)


@dataclass(frozen=True)
class EmbeddingCase:
    """test_embedding(vocab, start, length, n, hidden): this rank owns rows [start, start + length)
    of a `vocab`-row table; n token ids drawn from the whole vocabulary."""

    label: str
    vocab: int
    start: int
    length: int
    tokens: int
    hidden: int
    op_type = "embedding"

    @property
    def row_bytes(self) -> int:
        return self.hidden * DTYPE.itemsize

    def definition(self) -> Definition:
        return Definition(
            name=f"minisgl_embedding_bf16_d{self.hidden}",
            op_type=self.op_type,
            description=("Vocabulary-parallel embedding lookup (minisgl.kernel.indexing): "
                         "out[t] = weight[ids[t] - start] when this rank owns ids[t], else zeros; "
                         "the all-reduce across ranks fills those in."),
            tags=["minisgl", "chapter:19", "status:verified"],
            axes={
                "vocab_shard": AxisVar(type="var", description="rows of the table on this rank"),
                "num_tokens": AxisVar(type="var", description="tokens to look up"),
                "hidden_size": AxisConst(type="const", value=self.hidden),
            },
            inputs={
                "weight": TensorSpec(shape=["vocab_shard", "hidden_size"], dtype="bfloat16",
                                     description="rows [start, start + vocab_shard) of the table"),
                "ids": TensorSpec(shape=["num_tokens"], dtype="int32",
                                  description="token ids in the whole vocabulary"),
                "start": TensorSpec(shape=None, dtype="int64",
                                    description="first vocabulary id of this rank's rows"),
            },
            outputs={"out": TensorSpec(shape=["num_tokens", "hidden_size"], dtype="bfloat16")},
            reference=EMBEDDING_REFERENCE,
        )

    def make_inputs(self, gen: torch.Generator) -> dict[str, torch.Tensor | int]:
        return {
            "weight": torch.randn(self.length, self.hidden, generator=gen).to(DTYPE),
            "ids": torch.randint(0, self.vocab, (self.tokens,), generator=gen).int(),
            "start": self.start,
        }

    def driver_main(self, launch: Launch) -> str:
        return EMBEDDING_MAIN.format(length=self.length, tokens=self.tokens,
                                     row_bytes=self.row_bytes, start=self.start,
                                     splits_line=launch.splits_line,
                                     vector=VECTOR_TYPES[copy_unit(self.row_bytes)],
                                     warps=launch.embedding_warps)


Case = StoreKVCase | EmbeddingCase

# Mirrors main() of tests/cuda/test_kv_kernels.cu (tests/test_ch19_kernels.py keeps them in step).
CASES: dict[str, tuple[Case, ...]] = {
    "test_kv_kernels.cu": (
        StoreKVCase("store_kv uint4  (8 heads x 128 x bf16)", slots=300, tokens=37, heads=8,
                    head_dim=128),
        StoreKVCase("store_kv uint16 (row = 6 bytes)", slots=64, tokens=17, heads=1, head_dim=3),
        EmbeddingCase("embedding, full vocab", vocab=1000, start=0, length=1000, tokens=23,
                      hidden=64),
        EmbeddingCase("embedding, vocab shard [500, 750)", vocab=1000, start=500, length=250,
                      tokens=41, hidden=4096),
    ),
}


# ---------------------------------------------------------------------------------------------
# Solutions.
# ---------------------------------------------------------------------------------------------
def _source(path: Path) -> SourceFile:
    return SourceFile(path=path.name, content=path.read_text(encoding="utf-8"))


def solutions_for(definition: Definition) -> list[Solution]:
    op = definition.op_type
    cuda = Solution(
        name=f"{definition.name}_cuda",
        definition=definition.name,
        author="minisgl",
        description=("The chapter-19 CUDA kernel (kv_kernels.cuh) through the engine's torch "
                     "extension ext.cu, built just in time by main.py; the engine calls the same "
                     "binding through minisgl.kernel."),
        spec=BuildSpec(language="python", target_hardware=["cuda"], entry_point="main.py::run",
                       dependencies=["torch", "ninja", "nvcc"], destination_passing_style=False),
        sources=[SourceFile(path="main.py", content=CUDA_ENTRY[op]), _source(CSRC_DIR / "ext.cu"),
                 _source(CSRC_DIR / "kv_kernels.cuh")],
    )
    torch_solution = Solution(
        name=f"{definition.name}_torch",
        definition=definition.name,
        author="minisgl",
        description="The torch fallback of minisgl.kernel (torch_ops.py), used on CPUs.",
        spec=BuildSpec(language="python", target_hardware=["cpu", "cuda"],
                       entry_point="main.py::run", dependencies=["torch"],
                       destination_passing_style=False),
        sources=[SourceFile(path="main.py", content=TORCH_ENTRY[op]), _source(TORCH_OPS)],
    )
    return [cuda, torch_solution]


@contextlib.contextmanager
def imported_solution(solution: Solution):
    """The solution's entry function, imported from its sources written to a scratch package
    (as flashinfer-bench's Python builder does); unloaded afterwards."""
    package = f"fib_solution_{solution.hash()[:12]}"
    with tempfile.TemporaryDirectory(prefix="minisgl-solution-") as tmp:
        for src in solution.sources:
            path = Path(tmp) / package / src.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(src.content, encoding="utf-8")
        sys.path.insert(0, tmp)
        try:
            module = importlib.import_module(f"{package}.{solution.get_entry_path().stem}")
            yield getattr(module, solution.get_entry_symbol())
        finally:
            sys.path.remove(tmp)
            for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
                del sys.modules[name]


# ---------------------------------------------------------------------------------------------
# Running one workload on the emulator and judging the results.
# ---------------------------------------------------------------------------------------------
def run_reference(definition: Definition, inputs: dict[str, torch.Tensor | int]):
    """The Definition's reference outputs, by name."""
    namespace: dict = {}
    exec(compile(definition.reference, f"<reference {definition.name}>", "exec"), namespace)
    out = namespace["run"](*(inputs[name] for name in definition.inputs))
    out = out if isinstance(out, tuple | list) else (out,)
    return dict(zip(definition.outputs, out, strict=True))


def raw_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def from_bytes(data: bytes, shape: list[int], dtype: torch.dtype) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


@contextlib.contextmanager
def _env(name: str, value: str):
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def run_on_emulator(case: Case, definition: Definition, workload: Workload,
                    inputs: dict[str, torch.Tensor | int]) -> tuple[dict | None, str]:
    """The kernel's outputs for these inputs (by name), or None, and the emulator's log."""
    launch = read_launch()
    source = DRIVER_PRELUDE.format(workload=workload.uuid, definition=definition.name,
                                   threads_line=launch.threads_line)
    source += case.driver_main(launch)
    # A stable path per workload: the emulator caches the binary by source and path.
    driver = emu_runner.cache_root() / "trace" / f"{definition.name}_{workload.uuid[:8]}.cu"
    driver.parent.mkdir(parents=True, exist_ok=True)
    if not driver.exists() or driver.read_text(encoding="utf-8") != source:
        driver.write_text(source, encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="minisgl-trace-io-") as io_dir:
        for name, value in inputs.items():
            if isinstance(value, torch.Tensor):
                (Path(io_dir) / f"{name}.bin").write_bytes(raw_bytes(value))
        with _env("MINISGL_TRACE_IO", io_dir):
            result = emu_runner.execute(driver, echo=False)
        log = (result.stdout + result.stderr).strip()
        if not result.ok:
            return None, f"{result.summary()}\n{log}".strip()
        shapes = definition.get_output_shapes(workload.axes)
        outputs = {
            name: from_bytes((Path(io_dir) / f"{name}.bin").read_bytes(), shape, dtype)
            for (name, shape, dtype) in zip(definition.outputs, shapes,
                                            definition.torch_output_dtypes, strict=True)
        }
    return outputs, log


def correctness(outputs: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
                extra: dict) -> tuple[bool, Correctness]:
    """Bitwise equality decides; the errors (as flashinfer-bench computes them) are recorded."""
    equal, max_abs, max_rel = True, 0.0, 0.0
    for name, want in expected.items():
        got = outputs[name]
        equal = equal and got.shape == want.shape and raw_bytes(got) == raw_bytes(want)
        if got.shape == want.shape and want.numel():
            diff = (got.float() - want.float()).abs()
            max_abs = max(max_abs, diff.max().item())
            max_rel = max(max_rel, (diff / (want.float().abs() + 1e-8)).max().item())
    return equal, Correctness(max_absolute_error=max_abs, max_relative_error=max_rel,
                              extra={"bitwise_equal": equal, **extra})


def _evaluation(hardware: str, libs: dict[str, str], log: str,
                judged: tuple[bool, Correctness] | None, failure: EvaluationStatus) -> Evaluation:
    stamp = datetime.now(UTC).isoformat()
    env = Environment(hardware=hardware, libs=libs)
    if judged is None:
        return Evaluation(status=failure, environment=env, timestamp=stamp, log=log)
    equal, corr = judged
    if not equal:
        return Evaluation(status=EvaluationStatus.INCORRECT_NUMERICAL, environment=env,
                          timestamp=stamp, log=log, correctness=corr)
    return Evaluation(status=EvaluationStatus.PASSED, environment=env, timestamp=stamp, log=log,
                      correctness=corr, performance=Performance())


# ---------------------------------------------------------------------------------------------
# The whole set.
# ---------------------------------------------------------------------------------------------
def _blob(kind: str, definition: Definition, workload_uuid: str) -> str:
    name = definition.name
    return f"blob/{kind}/{definition.op_type}/{name}/{name}_{workload_uuid}.safetensors"


def _save_tensors(root: Path, rel: str, tensors: dict[str, torch.Tensor]) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp))
    os.replace(tmp, path)


def make_workload(program: str, case: Case, definition: Definition, root: Path
                  ) -> tuple[Workload, dict[str, torch.Tensor | int]]:
    """The case's Workload, with its inputs drawn from a generator seeded by the case and saved."""
    workload_uuid = str(uuid.uuid5(WORKLOAD_NAMESPACE, f"{program}: {case.label}"))
    gen = torch.Generator().manual_seed(zlib.crc32(workload_uuid.encode()))
    inputs = case.make_inputs(gen)
    rel = _blob("workloads", definition, workload_uuid)
    tensors = {k: v for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    _save_tensors(root, rel, tensors)
    specs = {name: (SafetensorsInput(path=rel, tensor_key=name) if name in tensors
                    else ScalarInput(value=inputs[name])) for name in definition.inputs}
    axes = definition.get_axes_values_from_inputs(inputs[name] for name in definition.inputs)
    return Workload(axes=axes, inputs=specs, uuid=workload_uuid), inputs


def write_trace_set(root: str | Path, programs: list[Path]) -> bool:
    """Writes the set for those of `programs` that CASES knows; True iff every evaluation passed.
    Files of an earlier run in `root` are replaced, other files are left alone."""
    root = Path(root)
    emu_libs = {"torch": torch.__version__, "host compiler": emu_runner.compiler_id(),
                "emulator runtime": emu_runner.runtime_digest()[:12]}
    definitions: dict[str, Definition] = {}
    workloads: dict[str, list[Trace]] = {}
    traces: dict[str, list[Trace]] = {}
    all_passed = True
    for program in programs:
        cases = CASES.get(Path(program).name)
        if cases is None:
            print(f"emu: trace: no cases known for {program} (tools/emu_trace.py CASES)",
                  file=sys.stderr)
            continue
        for case in cases:
            definition = definitions.setdefault(case.definition().name, case.definition())
            workload, inputs = make_workload(Path(program).name, case, definition, root)
            workloads.setdefault(definition.name, []).append(
                Trace(definition=definition.name, workload=workload))
            expected = run_reference(definition, inputs)
            cuda_solution, torch_solution = solutions_for(definition)

            outputs, log = run_on_emulator(case, definition, workload, inputs)
            judged = None
            if outputs is not None:
                rel = _blob("outputs", definition, workload.uuid)
                _save_tensors(root, rel, outputs)
                judged = correctness(outputs, expected, {"outputs": rel})
            evaluation = _evaluation("cpu_emulator", emu_libs, f"{EMULATOR_NOTE}\n{log}".strip(),
                                     judged, EvaluationStatus.RUNTIME_ERROR)
            emu_trace = Trace(definition=definition.name, workload=workload,
                              solution=cuda_solution.name, evaluation=evaluation)

            try:
                with imported_solution(torch_solution) as run:
                    result = run(*(inputs[name] for name in definition.inputs))
                result = result if isinstance(result, tuple | list) else (result,)
                judged, log = correctness(dict(zip(definition.outputs, result, strict=True)),
                                          expected, {}), ""
            except Exception as e:  # a broken solution is a trace too, not a crash
                judged, log = None, f"{type(e).__name__}: {e}"
            evaluation = _evaluation("cpu", {"torch": torch.__version__},
                                     f"{CPU_NOTE}\n{log}".strip(), judged,
                                     EvaluationStatus.RUNTIME_ERROR)
            cpu_trace = Trace(definition=definition.name, workload=workload,
                              solution=torch_solution.name, evaluation=evaluation)

            for t in (emu_trace, cpu_trace):
                status = t.evaluation.status.value
                all_passed = all_passed and status == EvaluationStatus.PASSED.value
                print(f"emu: trace {t.solution} on {case.label!r}: {status}", file=sys.stderr)
            traces.setdefault(definition.name, []).extend([emu_trace, cpu_trace])

    for definition in definitions.values():
        op, name = definition.op_type, definition.name
        save_json_file(definition, root / "definitions" / op / f"{name}.json")
        for solution in solutions_for(definition):
            save_json_file(solution, root / "solutions" / op / name / f"{solution.name}.json")
        save_jsonl_file(workloads[name], root / "workloads" / op / f"{name}.jsonl")
        save_jsonl_file(traces[name], root / "traces" / op / f"{name}.jsonl")
    count = sum(len(t) for t in traces.values())
    print(f"emu: wrote a FlashInfer Trace set to {root}: {len(definitions)} definitions, "
          f"{sum(len(w) for w in workloads.values())} workloads, {count} traces", file=sys.stderr)
    return all_passed

