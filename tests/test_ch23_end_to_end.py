"""Chapter 23: the roofline arithmetic and the per-op time breakdown.

The roofline is checked against the counts written out by hand for Qwen3-0.6B; the breakdown on a
small set recorded from direct op calls (no model load), whose calls and latencies are known.
"""

from __future__ import annotations

import json

import pytest
import torch

from minisgl.models.config import ModelConfig
from minisgl.ops import hook
from minisgl.trace import roofline as rf
from minisgl.trace.bench import BenchConfig, bench
from minisgl.trace.breakdown import format_times, op_times
from minisgl.trace.capture import Recorder
from minisgl.trace.runtime import Runtime
from minisgl.utils.offline import QWEN3_CONFIG, QWEN3_MOE_CONFIG


@pytest.fixture(scope="module")
def qwen3() -> ModelConfig:
    return ModelConfig.from_dict(QWEN3_CONFIG)


def test_qwen3_counts_by_hand(qwen3):
    # per layer: qkv 1024 x (16 + 2 * 8) * 128, o 16 * 128 x 1024, gate/up/down 3 x 1024 x 3072
    per_layer = 1024 * 32 * 128 + 2048 * 1024 + 3 * 1024 * 3072
    assert rf.linear_params(qwen3) == 28 * per_layer + 151936 * 1024
    assert rf.kv_bytes_per_token(qwen3) == 2 * 28 * 8 * 128 * 2  # K and V, bf16
    c = rf.decode_cost(qwen3, batch=4, context=100)
    params = rf.linear_params(qwen3)
    assert c.bytes_per_token == pytest.approx(params * 2 / 4 + 2 * 28 * 8 * 128 * 2 * 100)
    assert c.flops_per_token == 2 * params + 4 * 28 * 16 * 128 * 100


def test_decode_is_bandwidth_bound_and_batching_helps(qwen3):
    costs = [rf.decode_cost(qwen3, b, 1024) for b in [1, 8, 64, 256]]
    assert all(c.intensity < rf.H200.ridge for c in costs)  # below the ridge at every batch
    rates = [c.bound_tokens_per_s(rf.H200) for c in costs]
    assert rates == sorted(rates) and rates[-1] > 10 * rates[0]
    one = costs[0]
    assert one.bound_tokens_per_s(rf.H200) == pytest.approx(rf.H200.bytes_per_s /
                                                            one.bytes_per_token)
    assert one.bound_step_ms(rf.H200) == pytest.approx(1e3 * one.bytes_per_token /
                                                       rf.H200.bytes_per_s)
    compute = rf.Hardware("slow-alu", 1e15, 1e9)  # absurdly fast memory: now compute-bound
    assert one.bound_tokens_per_s(compute) == pytest.approx(1e9 / one.flops_per_token)


def test_roofline_rejects_what_it_cannot_model(qwen3):
    with pytest.raises(ValueError):
        rf.decode_cost(qwen3, 0, 10)
    with pytest.raises(ValueError):
        rf.decode_cost(qwen3, 1, -1)
    with pytest.raises(ValueError, match="dense"):
        rf.decode_cost(ModelConfig.from_dict(QWEN3_MOE_CONFIG), 1, 10)


def test_roofline_plot_and_table(qwen3, tmp_path):
    costs = [rf.decode_cost(qwen3, b, 512) for b in [1, 16]]
    png = rf.plot(costs, rf.H200, tmp_path / "roof.png", "Qwen3-0.6B", measured={16: 5000.0})
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = rf.table(qwen3, rf.H200, [1, 16], 512)
    assert "ridge 206 FLOP/B" in text and len(text.splitlines()) == 4


def test_breakdown_is_calls_times_latency(tmp_path):
    from minisgl.ops import silu_and_mul

    recorder = Recorder(tmp_path, max_per_definition=8)
    hook.install(Runtime(recorder))
    try:
        gen = torch.Generator().manual_seed(1)
        for n in [1, 1, 1, 3, 4, 16]:  # buckets 1 (x3), 4 (x2), 16 (x1)
            silu_and_mul(torch.randn(n, 8, generator=gen))
    finally:
        recorder.close()
        hook.install(None)
    calls = json.loads((tmp_path / "capture.json").read_text())["calls"]
    assert calls == {"silu_and_mul_i4": {"1": 3, "4": 2, "16": 1}}
    bench(tmp_path, BenchConfig("cpu", warmup=0, iters=1, trials=1, solutions=("torch",)))
    (row,) = op_times(tmp_path)
    assert row.definition == "silu_and_mul_i4" and row.calls == 6 and row.solution == "torch"
    from flashinfer_bench.data import TraceSet

    from minisgl.trace.breakdown import latencies

    lat = latencies(TraceSet.from_path(str(tmp_path)))["silu_and_mul_i4"]
    assert set(lat) == {1, 4, 16}  # one workload per bucket was kept
    want = 3 * lat[1]["torch"] + 2 * lat[4]["torch"] + lat[16]["torch"]
    assert row.total_ms == pytest.approx(want)
    assert op_times(tmp_path, solution="triton") == [
        type(row)("silu_and_mul_i4", 6, "", 0.0)]  # never benchmarked: nothing counted
    assert "100.0%" in format_times([row])
