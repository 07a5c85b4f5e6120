"""The CPU emulator for CUDA programs (tools/emu_kernels.py).

Every conformance program in tests/cuda/conformance/ must run cleanly and print exactly its
.expected file (those files were checked against an H200); every deliberate bug in
tests/cuda/bugs/ must be reported with the kernel, block and thread. A few more small programs
check the other errors the emulator catches. Compiled binaries are cached, so reruns are quick.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import emu_kernels  # noqa: E402

pytestmark = pytest.mark.skipif(
    shutil.which(emu_kernels.compiler()) is None, reason="needs a C++ compiler"
)

CONFORMANCE = sorted((REPO / "tests" / "cuda" / "conformance").glob("*.cu"))

# What each deliberate bug's report must mention.
BUGS = {
    "oob_global_write": [
        "out-of-bounds write just past the end of a 4000-byte cudaMalloc buffer",
        "kernel `fill_ramp`",
        "block (3,0,0)",
        "thread (232,0,0)",
    ],
    "divergent_syncthreads": [
        "barrier divergence",
        "kernel `divergent_tile`",
        "block (0,0,0)",
        "threads with threadIdx.x 0..126 step 2 (64 threads) wait at __syncthreads() at divergent_syncthreads.cu:14",
        "threads with threadIdx.x 1..127 step 2 (64 threads) wait at __syncthreads() at divergent_syncthreads.cu:16",
    ],
    "shfl_exited_lanes": [
        "warp collective with lane 16 missing from mask",
        "kernel `half_warp_sum`",
        "block (0,0,0)",
        "thread (0,0,0)",
        "__shfl_down_sync(mask 0xffffffff)",
        "lane 16 (thread (16,0,0)) has already exited",
    ],
    "smem_oob_read": [
        "out-of-bounds shared memory read just past the end of the 512 bytes of dynamic shared memory",
        "kernel `neighbour_diff`",
        "block (0,0,0)",
        "thread (127,0,0)",
    ],
}


def test_the_suite_is_all_there():
    assert len(CONFORMANCE) >= 10
    for program in CONFORMANCE:
        assert program.with_suffix(".expected").is_file(), program
    assert sorted(p.stem for p in (REPO / "tests" / "cuda" / "bugs").glob("*.cu")) == sorted(BUGS)


@pytest.mark.parametrize("program", CONFORMANCE, ids=lambda p: p.stem)
def test_conformance_program(program):
    result = emu_kernels.execute(program, echo=False)
    assert result.ok, f"{result.reason}\n{result.stdout}\n{result.stderr}"
    assert result.stdout == program.with_suffix(".expected").read_text()
    assert result.stdout.rstrip().endswith(f"conformance {program.stem}: ok")
    assert "PASS" not in result.summary() and result.summary().startswith("emu: ok (")


@pytest.mark.parametrize("name", sorted(BUGS))
def test_bug_is_reported(name):
    result = emu_kernels.execute(REPO / "tests" / "cuda" / "bugs" / f"{name}.cu", echo=False)
    assert result.compiled and not result.ok
    assert result.returncode != 0 and result.emu_errors == 1
    assert "emu: error:" in result.stderr
    for needle in BUGS[name]:
        assert needle in result.stderr, f"{needle!r} missing from:\n{result.stderr}"
    assert "PASS" not in result.summary() and "FAILED" in result.summary()


# ---------------------------------------------------------------------------------------------
# More errors, from small programs written next to the cache (a stable path keeps them cached).
# ---------------------------------------------------------------------------------------------
PROLOGUE = "#include <cstdio>\n#include <cuda_runtime.h>\n"
EXTRA = {
    "deadlock": """
__global__ void stuck(int* out) {
    if (threadIdx.x < 16) __syncwarp();  // waits for lanes 16..31 of warp 0 ...
    else __syncthreads();                // ... which wait here for lanes 0..15
    out[threadIdx.x] = 1;
}
int main() { int* d; cudaMalloc(&d, 256); stuck<<<1, 64>>>(d); return 0; }
""",
    "spin_on_other_block": """
__global__ void wait_for_block1(volatile int* flag) {
    if (blockIdx.x == 0) { while (*flag == 0) {} }  // block 1 never runs before block 0 ends
    else *flag = 1;
}
int main() { int* d; cudaMalloc(&d, 4); cudaMemset(d, 0, 4); wait_for_block1<<<2, 1>>>(d); return 0; }
""",
    "nanosleep_handshake": """
__global__ void handshake(int* out) {
    __shared__ volatile int flag;
    if (threadIdx.x == 0) flag = 0;
    __syncthreads();
    if (threadIdx.x == 0) { while (flag == 0) __nanosleep(100); out[0] = flag; }
    if (threadIdx.x == 33) flag = 7;
}
int main() {
    int* d; int h = 0;
    cudaMalloc(&d, 4); handshake<<<1, 64>>>(d); cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost);
    printf("flag %d\\n", h); return h == 7 ? 0 : 1;
}
""",
    "nanosleep_forever": """
__global__ void wait_forever(volatile int* flag) {
    while (*flag == 0) __nanosleep(1000);  // nobody ever sets it
}
int main() { int* d; cudaMalloc(&d, 4); cudaMemset(d, 0, 4); wait_forever<<<1, 4>>>(d); return 0; }
""",
    "stack_overflow": """
__device__ int deep(int n) {
    volatile char pad[4096];
    pad[n % 4096] = static_cast<char>(n);
    return n == 0 ? 0 : deep(n - 1) + pad[n % 4096];
}
__global__ void recurse(int* out) { out[threadIdx.x] = deep(100000); }
int main() { int* d; cudaMalloc(&d, 64); recurse<<<1, 2>>>(d); return 0; }
""",
    "partial_warp_full_mask": """
__global__ void sum48(int* out) {
    int v = threadIdx.x;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);  // warp 1 has 16 lanes
    out[threadIdx.x] = v;
}
int main() { int* d; cudaMalloc(&d, 48 * 4); sum48<<<1, 48>>>(d); return 0; }
""",
    "use_after_free": """
__global__ void poke(float* p) { p[threadIdx.x] = 1.0f; }
int main() { float* d; cudaMalloc(&d, 1024); cudaFree(d); poke<<<1, 32>>>(d); return 0; }
""",
    "memcpy_overrun": """
int main() {
    static char host[8192] = {};
    char* d; cudaMalloc(&d, 1000);
    cudaMemcpy(d, host, 1001, cudaMemcpyHostToDevice);
    return 0;
}
""",
    "exit_code_3": """
__global__ void hello() { printf("hello from thread %d\\n", threadIdx.x); }
int main() { hello<<<1, 2>>>(); cudaDeviceSynchronize(); printf("host done\\n"); return 3; }
""",
}


@pytest.fixture(scope="module")
def extra_programs() -> dict[str, Path]:
    folder = emu_kernels.cache_root() / "pytest-programs"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, body in EXTRA.items():
        path = folder / f"{name}.cu"
        text = PROLOGUE + body
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        paths[name] = path
    return paths


@pytest.mark.parametrize(
    "name, needles",
    [
        (
            "deadlock",
            [
                "deadlock in kernel `stuck`, block (0,0,0)",
                "threads with threadIdx.x 0..15 (16 threads) wait at __syncwarp(mask 0xffffffff)",
                "threads with threadIdx.x 16..63 (48 threads) wait at __syncthreads()",
            ],
        ),
        (
            "stack_overflow",
            ["stack overflow of a CUDA thread", "kernel `recurse`", "thread (0,0,0)"],
        ),
        (
            "partial_warp_full_mask",
            [
                "warp collective with lane 16 missing from mask",
                "the warp has no lane 16",
                "kernel `sum48`",
                "thread (32,0,0)",
            ],
        ),
        (
            "use_after_free",
            ["use after free", "1024-byte device buffer", "kernel `poke`", "thread (0,0,0)"],
        ),
        (
            "memcpy_overrun",
            [
                "cudaMemcpy: 1001 bytes at offset 0 of the destination buffer overrun its 1000 bytes by 1 byte"
            ],
        ),
    ],
)
def test_more_errors_are_reported(extra_programs, name, needles):
    result = emu_kernels.execute(extra_programs[name], echo=False)
    assert result.compiled and not result.ok and result.emu_errors == 1
    for needle in needles:
        assert needle in result.stderr, f"{needle!r} missing from:\n{result.stderr}"


def test_a_spin_wait_on_another_block_is_reported_not_hung(extra_programs, monkeypatch):
    monkeypatch.setenv("MINISGL_EMU_SPIN_LIMIT_S", "1")
    result = emu_kernels.execute(extra_programs["spin_on_other_block"], echo=False, timeout=60)
    assert not result.ok and result.emu_errors == 1
    assert (
        "spin-wait on another block" in result.stderr
        and "kernel `wait_for_block1`, block (0,0,0)" in result.stderr
    )


def test_threads_that_only_yield_are_caught_by_the_watchdog(extra_programs, monkeypatch):
    monkeypatch.setenv("MINISGL_EMU_SPIN_LIMIT_S", "1")
    result = emu_kernels.execute(extra_programs["nanosleep_forever"], echo=False, timeout=60)
    assert not result.ok and result.emu_errors == 1
    assert (
        "no CUDA thread reached a barrier" in result.stderr
        and "kernel `wait_forever`" in result.stderr
    )


def test_nanosleep_lets_a_thread_wait_for_another_of_its_block(extra_programs):
    result = emu_kernels.execute(extra_programs["nanosleep_handshake"], echo=False)
    assert result.ok, result.stderr
    assert result.stdout == "flag 7\n"


def test_run_streams_output_and_reports_the_exit_code(extra_programs, capsys):
    assert emu_kernels.run(extra_programs["exit_code_3"]) is False
    out, err = capsys.readouterr()
    assert out == "hello from thread 0\nhello from thread 1\nhost done\n"
    assert "emu: FAILED" in err and "exit code 3" in err and "PASS" not in err


def test_run_accepts_str_and_reports_success(capsys):
    assert emu_kernels.run(str(REPO / "tests" / "cuda" / "conformance" / "device_query.cu")) is True
    out, err = capsys.readouterr()
    assert out.endswith("conformance device_query: ok\n")
    assert "emu: ok (0 kernels)" in err


def test_a_program_that_does_not_compile(tmp_path):
    bad = tmp_path / "broken.cu"
    bad.write_text("__global__ void k() { undeclared_thing(); }\nint main() { k<<<1, 1>>>(); }\n")
    result = emu_kernels.execute(bad, echo=False)
    assert not result.compiled and result.reason == "does not compile"
    assert "undeclared_thing" in result.stderr


def test_cli_exit_status(extra_programs, capsys):
    good = REPO / "tests" / "cuda" / "conformance" / "device_query.cu"
    assert emu_kernels.main([str(good)]) == 0
    assert (
        emu_kernels.main([str(good), str(REPO / "tests" / "cuda" / "bugs" / "oob_global_write.cu")])
        == 1
    )
    err = capsys.readouterr().err
    assert "emu: 1 of 2 programs FAILED" in err and "PASS" not in err


# ---------------------------------------------------------------------------------------------
# The source rewrite, without compiling anything.
# ---------------------------------------------------------------------------------------------
def rewrite(src: str) -> str:
    return emu_kernels.rewrite_source(src, "t.cu")


def test_rewrite_launches():
    out = rewrite(
        "void f(float* p, cudaStream_t s) {\n  ns::k<float, 128><<<g, dim3(4, 4), 0, s>>>(p, n);\n  z<<<1,1>>>();\n}\n"
    )
    assert '::emu::launch(::emu::launch_config(g, dim3(4, 4), 0, s), "ns::k<float,128>", ' in out
    assert "{ ns::k<float, 128>(emu_args_...); }, p, n)" in out
    assert (
        '::emu::launch(::emu::launch_config(1,1), "z", [=](auto&&... emu_args_) { z(emu_args_...); })'
        in out
    )
    assert out.count("\n") == 4  # line numbers are kept


def test_rewrite_leaves_comments_and_strings_alone():
    src = "// k<<<1, 1>>>(x);\nconst char* s = \"__shared__ k<<<1,1>>>()\";\nint big = 1'000'000; /* __shared__ */\n"
    assert rewrite(src) == src


def test_rewrite_shared_declarations():
    out = rewrite(
        "extern __shared__ __align__(16) unsigned char smem[];\n"
        "__global__ void k() {\n  __shared__ float a[32], b[32];\n  static __shared__ int n;\n"
        "  extern __shared__ float dyn[];\n}\n"
    )
    assert (
        "static unsigned char* const& smem = reinterpret_cast<unsigned char* const&>(::emu::g_dyn_smem);"
        in out
    )
    assert "static float a[32], b[32];" in out and "static int n;" in out
    assert "static float* const& dyn = reinterpret_cast<float* const&>(::emu::g_dyn_smem);" in out
    assert "__shared__" not in out


def test_rewrite_inline_specifiers_and_attributes():
    out = rewrite(
        "static inline __device__ __forceinline__ int f() { return 1; }\n"
        "__noinline__ __device__ int g() { return 2; }\n"
        "cudaFuncSetAttribute(k<float, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 16);\n"
    )
    assert "inline" not in out.split("__forceinline__")[0]
    assert "__attribute__((noinline)) __device__ int g()" in out
    assert (
        '::emu::func_set_attribute_named("k<float,2>", k<float, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize'
        in out
    )


def test_cuda_version_flag(monkeypatch):
    monkeypatch.setenv("MINISGL_EMU_CUDA_VERSION", "12.4")
    assert emu_kernels.cuda_version_flags() == ["-DMINISGL_EMU_CUDA_VERSION=12040"]
    monkeypatch.setenv("MINISGL_EMU_CUDA_VERSION", "13000")
    assert emu_kernels.cuda_version_flags() == ["-DMINISGL_EMU_CUDA_VERSION=13000"]
    monkeypatch.delenv("MINISGL_EMU_CUDA_VERSION")
    assert emu_kernels.cuda_version_flags() == []
