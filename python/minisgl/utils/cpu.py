"""What this CPU can do, for the choices the engine makes once at start-up on a CPU (chapter 20).

A decode step on a CPU is bound by reading the weights: bf16 weights halve the bytes, and CPUs with
native bf16 arithmetic (the AVX-512 BF16 instructions, or AMX's tile units) multiply them as fast
as fp32 ones. Without those instructions a bf16 matrix multiply converts every weight to fp32
first and runs slower than fp32 itself, so there "auto" stays fp32.
"""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path

import torch

from minisgl.env import load_env

# /proc/cpuinfo's names for the instructions that multiply bf16 natively
BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@cache
def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of the first CPU in /proc/cpuinfo (empty where there is none:
    macOS, Windows)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def native_bf16(flags: frozenset[str] | None = None) -> str | None:
    """The flag that says this CPU computes in bf16 natively, or None."""
    flags = cpu_flags() if flags is None else flags
    return next((f for f in BF16_FLAGS if f in flags), None)


def preferred_cpu_dtype() -> torch.dtype:
    """The CPU's dtype for "auto": MINISGL_CPU_DTYPE when it names one; else bf16 where the CPU
    computes it natively (half the bytes of weights and KV per token, and a CPU decode step is
    bound by reading them), fp32 elsewhere."""
    choice = load_env().cpu_dtype
    if choice != "auto":
        return getattr(torch, choice)  # "float32" or "bfloat16", checked by load_env
    return torch.bfloat16 if native_bf16() else torch.float32


def describe_threads() -> str:
    """torch's intra-op thread count against the machine's CPUs, for the start-up log. torch
    starts one thread per physical core, which is what a bandwidth-bound decode wants: a second
    hyper-thread per core adds no memory bandwidth and makes each op's threads wait for the
    slowest (OMP_NUM_THREADS or torch.set_num_threads change it)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{torch.get_num_threads()} torch threads on {usable} usable logical CPUs "
            f"({platform.machine()}, {torch.backends.cpu.get_cpu_capability()})")
