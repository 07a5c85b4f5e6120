"""Programmatic dependent launch (PDL): let a kernel start before the one before it has finished.

A decode step at batch 1 is a chain of ~230 small kernels, each waiting for the previous one. On
the GPU every boundary costs more than the launch: the next kernel's programs are only placed on
the SMs once the previous kernel has drained, and only then start their first loads from HBM.
Hopper (sm_90) can overlap that. A kernel launched with the PDL attribute may start while the
previous kernel is still running, and each of its programs then:

1. does the work that does not depend on the previous kernel: here, loading weights, which no
   kernel ever writes, so the slowest part of a GEMV (its first trip to HBM) overlaps the
   previous kernel's tail;
2. calls `gdc_wait()`, which returns once the previous kernel has finished and its writes are
   visible; every other load, and every store, comes after it;
3. calls `gdc_launch_dependents()`, which lets the *next* kernel start its own step 1 as soon as
   every program of this one has got here.

Correctness rests on one rule: nothing before `gdc_wait()` reads what another kernel writes, and
nothing before it writes at all. Every program calls `gdc_wait()`, unconditionally, so a kernel
never finishes before the one it follows: the chain stays ordered even across kernels that do not
use PDL (cuBLAS, torch's own), which start, as always, only when the previous kernel is done.

CUDA graphs record the attribute, so replays keep the overlap. Without sm_90, under Triton's CPU
interpreter, or with MINISGL_DISABLE_PDL=1 in the environment (read once), the kernels are
launched the plain way and the `PDL` branches are compiled out.
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from minisgl.env import load_env


@functools.cache
def switched_off() -> bool:
    """MINISGL_DISABLE_PDL, read once: pdl_args runs on every launch."""
    return load_env().disable_pdl


@functools.cache
def _device_supports(index: int) -> bool:
    # ROCm builds of torch also call their GPUs "cuda", with the gfx version as the capability
    # (9.4 on an MI300): griddepcontrol is NVIDIA's, from sm_90 on
    return torch.version.hip is None and torch.cuda.get_device_capability(index)[0] >= 9


def pdl_enabled(device: torch.device) -> bool:
    """Whether kernels on `device` should be launched with PDL."""
    if device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    if switched_off():
        return False
    return _device_supports(device.index if device.index is not None
                            else torch.cuda.current_device())


def pdl_args(device: torch.device, rows: int) -> dict[str, bool]:
    """The keywords of a PDL-aware kernel's launch: the kernel's `PDL` switch and Triton's launch
    option, which must agree (a kernel launched with PDL that never waits would race).

    Only launches for one token (one row, one request) use PDL. That is the batch-1 decode step,
    where Triton kernels follow Triton kernels and each is short. With several rows the Triton
    kernels sit between cuBLAS matrix products, which never release their successors early, so
    there is nothing to overlap; with PDL on every launch the official bench.py ran 2% slower on
    an H100 (benchmarks/results/h100_pdl.txt), so those launches stay plain."""
    on = rows == 1 and pdl_enabled(device)
    return {"PDL": True, "launch_pdl": True} if on else {"PDL": False}


@triton.jit
def wait_for_previous_kernel(PDL: tl.constexpr):
    """Steps 2 and 3 above: wait until the previous kernel's writes are visible, then let the
    next kernel start. Without PDL it is nothing (the launch itself already waited)."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
