"""Chapter 21: FlashInfer Trace workloads captured from the live engine.

One capture (LLM.generate on 8 chat prompts, SmolLM2, CPU) serves the module: the folder must load
with flashinfer_bench's TraceSet, hold workloads for every op the engine ran, and every
Definition's reference run() must reproduce what the engine computed on each saved workload.
"""

from __future__ import annotations

import json

import pytest
import safetensors.torch
import torch
from flashinfer_bench.data import TraceSet

import minisgl.kernel.triton  # noqa: F401  (first: it sets up Triton's interpreter on a CPU)
from minisgl.ops import hook
from minisgl.trace.capture import Recorder, output_path
from minisgl.trace.demo import chat_prompts, mixed_params
from minisgl.trace.ops import OPS, pow2_bucket, spec_for, tolerance
from minisgl.trace.replay import load_inputs, reference_fn
from minisgl.trace.runtime import Runtime

MAX_TOKENS = 3


@pytest.fixture(scope="module")
def captured(tmp_path_factory, smollm2_dir):
    from minisgl.llm import LLM

    root = tmp_path_factory.mktemp("trace")
    llm = LLM(str(smollm2_dir), trace_dir=str(root), max_running_reqs=8)
    prompts = chat_prompts(llm)
    outputs = llm.generate(prompts, mixed_params(len(prompts), MAX_TOKENS), use_tqdm=False)
    llm.shutdown()
    assert hook.installed is None  # shutdown uninstalls the recorder
    return root, outputs


def test_capture_loads_as_a_trace_set(captured):
    root, outputs = captured
    assert all(len(o["token_ids"]) >= 1 for o in outputs)
    ts = TraceSet.from_path(str(root))
    ran = json.loads((root / "capture.json").read_text())["definitions_run"]
    # every op the engine ran has a Definition and at least one workload
    assert sorted(ts.definitions) == sorted(ran)
    assert all(ts.workloads.get(name) for name in ran)
    ops = {spec_for(d).op for d in ts.definitions.values()}
    assert ops >= {"embedding", "store_kv", "fused_add_rmsnorm", "rope", "silu_and_mul",
                   "attention", "sampling"}
    names = set(ts.definitions)
    # SmolLM2: 9 query heads, 3 KV heads, head dim 64, hidden 576, intermediate 1536
    assert {"gqa_paged_decode_h9_kv3_d64_ps1", "gqa_paged_prefill_causal_h9_kv3_d64_ps1",
            "fused_add_rmsnorm_h576", "silu_and_mul_i1536", "rope_h9_kv3_d64",
            "top_k_top_p_sampling_from_logits_v49152"} <= names
    rope = ts.definitions["rope_h9_kv3_d64"]
    assert rope.const_axes["num_qo_heads"] == 9 and rope.const_axes["head_dim"] == 64
    assert rope.var_axes == ["num_tokens"]


def test_workloads_are_deduplicated_and_capped(captured):
    root, _ = captured
    ts = TraceSet.from_path(str(root))
    for name, workloads in ts.workloads.items():
        spec = spec_for(ts.definitions[name])
        keys = [spec.dedup_key(w.workload.axes) for w in workloads]
        assert len(keys) == len(set(keys)), name
        assert 1 <= len(workloads) <= 8


def test_references_reproduce_the_engine(captured):
    root, _ = captured
    ts = TraceSet.from_path(str(root))
    checked = 0
    for name, definition in ts.definitions.items():
        spec, reference = spec_for(definition), reference_fn(definition)
        for wl in ts.workloads[name]:
            inputs = load_inputs(root, wl, torch.device("cpu"), {})
            want = safetensors.torch.load_file(str(output_path(root, definition,
                                                               wl.workload.uuid)))
            got = reference(**inputs)
            got = got if isinstance(got, tuple) else (got,)
            for out_name, g in zip(definition.outputs, got):
                w = want[out_name]
                tol = tolerance(spec, w.dtype)
                if tol is None:
                    assert torch.equal(g, w), (name, out_name)
                else:
                    torch.testing.assert_close(g, w, atol=tol[0], rtol=tol[1], msg=name)
            checked += 1
    assert checked >= len(ts.definitions)


def test_moe_and_rmsnorm_ops_are_captured_and_reproduced(tmp_path):
    """The bundled model has no MoE layer: call the MoE op (and a plain RMSNorm) directly."""
    from minisgl.layers.norm import RMSNorm
    from minisgl.ops.moe import fused_moe

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 16, generator=gen)
    logits = torch.randn(5, 4, generator=gen)
    w13 = torch.randn(4, 2 * 8, 16, generator=gen) * 0.1
    w2 = torch.randn(4, 16, 8, generator=gen) * 0.1
    norm = RMSNorm(16, 1e-6)
    norm.weight = torch.rand(16, generator=gen) + 0.5
    recorder = Recorder(tmp_path)
    hook.install(Runtime(recorder))
    try:
        moe_out = fused_moe(x, logits, w13, w2, 2, True)
        norm_out = norm.forward(x)
    finally:
        hook.install(None)
    ts = TraceSet.from_path(str(tmp_path))
    assert set(ts.definitions) == {"moe_topk2_e4_h16_i8", "rmsnorm_h16"}
    for name, engine_out in [("moe_topk2_e4_h16_i8", moe_out), ("rmsnorm_h16", norm_out)]:
        (wl,) = ts.workloads[name]
        inputs = load_inputs(tmp_path, wl, torch.device("cpu"), {})
        torch.testing.assert_close(reference_fn(ts.definitions[name])(**inputs), engine_out,
                                   atol=1e-5, rtol=1e-5)


def test_without_a_runtime_ops_run_as_written():
    from minisgl.ops import silu_and_mul

    assert hook.installed is None
    x = torch.randn(3, 8)
    torch.testing.assert_close(silu_and_mul(x), torch.nn.functional.silu(x[:, :4]) * x[:, 4:])


def test_recorder_cap_and_dedup(tmp_path):
    from minisgl.ops import silu_and_mul

    recorder = Recorder(tmp_path, max_per_definition=2)
    hook.install(Runtime(recorder))
    try:
        for n in [1, 1, 2, 3, 4, 5, 100]:  # buckets 1, 1, 2, 4, 4, 8, 128
            silu_and_mul(torch.randn(n, 8))
    finally:
        hook.install(None)
    (workloads,) = TraceSet.from_path(str(tmp_path)).workloads.values()
    assert [w.workload.axes["num_tokens"] for w in workloads] == [1, 2]
    assert pow2_bucket(0) == 0 and pow2_bucket(5) == 8 and pow2_bucket(8) == 8
    assert set(OPS) >= {"rmsnorm", "moe", "sampling", "attention"}


class Seen:
    """A hook of the test's own: it records each op call and runs what the rule picks."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.paused = 0

    def run(self, op, args):
        self.calls.append(op.name)
        return op.pick(*args)(*args)

    def pause_recording(self) -> None:
        self.paused += 1

    def resume_recording(self) -> None:
        self.paused -= 1

    def wants_eager(self, batch) -> bool:
        return batch == "unseen"


def test_the_registry_hook_sees_every_op_call(tmp_path):
    """Any object with the hook's four methods can be installed: it sees each op call of a model
    (the plain ops inside a fused one too) and runs it; uninstalled, nothing more is seen."""
    from test_ch03_models import CASES, save_random_hf_model

    from minisgl.models.weight import load_model

    model_type, arch, overrides = CASES["qwen3-qknorm"]
    save_random_hf_model(tmp_path, model_type, arch, **overrides)
    model = load_model(tmp_path)
    ids, positions = torch.tensor([3, 1, 4]), torch.arange(3)
    expected = model.forward(ids, positions)
    seen = Seen()
    hook.install(seen)
    try:
        got = model.forward(ids, positions)
        hook.pause_recording()
        assert seen.paused == 1 and hook.wants_eager("unseen") and not hook.wants_eager("seen")
        hook.resume_recording()
    finally:
        hook.install(None)
    assert torch.equal(got, expected)
    # each fused op (chapter 20) first, then the plain ops its torch reference calls
    per_layer = ["fused_add_rmsnorm_linear", "fused_add_rmsnorm", "linear",  # norm + qkv_proj
                 "rope", "linear",  # o_proj
                 "fused_add_rmsnorm_linear", "fused_add_rmsnorm", "linear",  # norm + gate_up
                 "silu_and_mul_linear", "silu_and_mul", "linear"]  # SiLU-and-mul + down_proj
    layers = len(model.model.layers)
    assert seen.calls == ["embedding", *per_layer * layers, "fused_add_rmsnorm"]
    model.forward(ids, positions)
    assert hook.installed is None and seen.paused == 0 and not hook.wants_eager("unseen")


def test_the_server_records_a_trace_while_serving(tmp_path, smollm2_dir):
    """`python -m minisgl --trace-dir DIR`: the server's scheduler process starts the session
    (the engine never imports trace/), records while it serves, and writes the summary when it
    stops."""
    from conftest import RunningServer

    root = tmp_path / "served"
    server = RunningServer(["--model", str(smollm2_dir), "--num-tokenizer", "1",
                            "--num-pages", "512", "--max-seq-len", "512",
                            "--max-running-requests", "4", "--trace-dir", str(root)])
    try:
        # sampled, not greedy: the sampling op runs only for rows that draw a token
        status, reply = server.post("/v1/completions", {"prompt": "The capital of France is",
                                                         "max_tokens": 3, "temperature": 0.8,
                                                         "top_p": 0.9})
        assert status == 200, reply
    finally:
        assert server.stop() == 0, server.log_text()
    ran = json.loads((root / "capture.json").read_text())["definitions_run"]
    ts = TraceSet.from_path(str(root))
    assert {spec_for(ts.definitions[name]).op for name in ran} >= {
        "embedding", "store_kv", "rope", "attention", "sampling"}
    assert all(ts.workloads.get(name) for name in ran)
