"""Programmatic dependent launch (kernel/triton/pdl.py): when it is on, and that a chain of
PDL-launched kernels replayed in a CUDA graph computes exactly what the plain launches compute.

A kernel launched with PDL may start while the previous one still runs; only its `gdc_wait()`
keeps it from reading the previous kernel's output too early. A misplaced wait shows up as a
stale read, so the GPU test feeds each replay fresh inputs and every kernel reads what the one
before it has just written: a read from the previous replay gives a different answer.
"""

from __future__ import annotations

import pytest
import torch

from minisgl.kernel.triton import gemv_rmsnorm, gemv_silu_and_mul, pdl, rms_norm
from minisgl.kernel.triton.pdl import pdl_args, pdl_enabled

SWITCH = "MINISGL_DISABLE_PDL"


@pytest.fixture
def pdl_switch(monkeypatch):
    """set_switch(off): MINISGL_DISABLE_PDL=1 or unset, and the cached reading of it cleared."""
    def set_switch(off: bool) -> None:
        if off:
            monkeypatch.setenv(SWITCH, "1")
        else:
            monkeypatch.delenv(SWITCH, raising=False)
        pdl.switched_off.cache_clear()

    yield set_switch
    monkeypatch.delenv(SWITCH, raising=False)
    pdl.switched_off.cache_clear()


def test_pdl_is_off_on_the_cpu_and_under_the_interpreter(monkeypatch):
    assert not pdl_enabled(torch.device("cpu"))
    assert pdl_args(torch.device("cpu"), rows=1) == {"PDL": False}
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the interpreter has no griddepcontrol
    assert not pdl_enabled(torch.device("cuda", 0))


def test_the_environment_switch_turns_pdl_off(monkeypatch, pdl_switch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pdl_switch(off=True)
    assert not pdl_enabled(torch.device("cuda", 0))  # decided before the device is asked


@pytest.mark.parametrize("hip, capability, expected",
                         [(None, (9, 0), True), (None, (8, 0), False), ("6.2", (9, 4), False)])
def test_only_nvidia_sm90_and_later(monkeypatch, pdl_switch, hip, capability, expected):
    """A ROCm build of torch calls its GPUs "cuda" too, with the gfx version (9.4 on an MI300)
    as the capability: no griddepcontrol there."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    pdl_switch(off=False)
    monkeypatch.setattr(torch.version, "hip", hip)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: capability)
    pdl._device_supports.cache_clear()
    try:
        assert pdl_enabled(torch.device("cuda", 0)) is expected
    finally:
        pdl._device_supports.cache_clear()


@pytest.mark.parametrize("rows", [0, 2, 3, 256])
def test_only_one_token_launches_use_pdl(monkeypatch, rows):
    monkeypatch.setattr(pdl, "pdl_enabled", lambda device: True)  # as on a Hopper GPU
    device = torch.device("cuda", 0)
    assert pdl.pdl_args(device, rows=1) == {"PDL": True, "launch_pdl": True}
    assert pdl.pdl_args(device, rows=rows) == {"PDL": False}


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def _decoder(x, residual, weights, norm_w, final_w):
    """A stack of one-token layers as the decode step runs them: RMSNorm (with the residual add)
    fused into an up projection, SiLU-and-mul fused into a down projection, a final RMSNorm."""
    for up, down in weights:
        h, residual = gemv_rmsnorm(x, up, None, norm_w, 1e-6, residual)
        x = gemv_silu_and_mul(h, down)
    return rms_norm(x + residual, final_w, 1e-6)


def _captured(pdl_switch, on: bool, static, weights, norm_w, final_w):
    pdl_switch(off=not on)
    assert pdl_enabled(static[0].device) == on
    _decoder(*static, weights, norm_w, final_w)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _decoder(*static, weights, norm_w, final_w)
    return graph, out


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="PDL needs a CUDA device of compute capability 9.0+")
def test_a_pdl_chain_replayed_in_a_cuda_graph_equals_plain_launches(pdl_switch):
    g = torch.Generator(device="cuda").manual_seed(20)
    k, layers, dtype = 1024, 12, torch.bfloat16

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, device="cuda", dtype=dtype, generator=g) * scale)

    weights = [(rand(2 * k, k, scale=k ** -0.5), rand(k, k, scale=k ** -0.5))
               for _ in range(layers)]
    norm_w, final_w = 1 + rand(k, scale=0.1), 1 + rand(k, scale=0.1)
    static = (rand(1, k), rand(1, k))
    plain_graph, plain_out = _captured(pdl_switch, False, static, weights, norm_w, final_w)
    pdl_graph, pdl_out = _captured(pdl_switch, True, static, weights, norm_w, final_w)
    for step in range(30):
        static[0].copy_(rand(1, k))
        static[1].copy_(rand(1, k))
        pdl_out.fill_(float("nan"))  # poisoned: the graph must write every element
        plain_graph.replay()
        pdl_graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(pdl_out, plain_out), f"replay {step}: PDL and plain launches differ"
    pdl_switch(off=True)
    eager = _decoder(*static, weights, norm_w, final_w)
    assert torch.equal(eager, pdl_out)
