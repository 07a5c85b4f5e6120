"""Chapter 22: the benchmark grades every solution, and apply only ever picks verified ones.

A planted solution that is fast but wrong (fused add + RMSNorm without the norm) must be graded
INCORRECT_NUMERICAL and never chosen; one that raises is a RUNTIME_ERROR; torch and the
interpreted Triton kernels PASS. With apply, greedy outputs equal those without it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
import torch
from flashinfer_bench.data import EvaluationStatus, TraceSet

import minisgl.kernel.triton  # noqa: F401  (first: it sets up Triton's interpreter on a CPU)
from minisgl import ops
from minisgl.core import SamplingParams
from minisgl.ops import hook
from minisgl.trace.apply import MIN_GAIN, Applier, Choice, best_per_bucket, pick
from minisgl.trace.bench import BenchConfig, bench
from minisgl.trace.demo import chat_prompts
from minisgl.trace.report import plot, rows, table
from minisgl.trace.runtime import Runtime
from minisgl.trace.solutions import Impl, engine_default, find, register, unregister


def planted_norm(x, residual, weight, eps):
    total = x + residual
    return weight * total, total  # skips the normalisation: fast, and wrong


def broken_silu(x):
    raise RuntimeError("this solution always fails")


@pytest.fixture(scope="module")
def benched(tmp_path_factory, smollm2_dir):
    from minisgl.llm import LLM

    root = tmp_path_factory.mktemp("trace")
    llm = LLM(str(smollm2_dir), trace_dir=str(root), max_running_reqs=8)
    prompts = chat_prompts(llm)[:3]  # short: the Triton kernels run interpreted
    greedy = SamplingParams(max_tokens=3)
    plain = llm.generate(prompts, greedy, use_tqdm=False)
    llm.shutdown()
    register(Impl("fused_add_rmsnorm", "planted", "python", planted_norm, "planted, wrong"))
    register(Impl("silu_and_mul", "broken", "python", broken_silu, "planted, raises"))
    try:
        bench(root, BenchConfig("cpu", warmup=0, iters=1, trials=1, max_workloads=2,
                                solutions=("torch", "triton", "planted", "broken"),
                                definitions=("fused_add_rmsnorm", "silu_and_mul",
                                             "minisgl_store_kv")))
        yield root, prompts, greedy, plain
    finally:
        unregister("fused_add_rmsnorm", "planted")
        unregister("silu_and_mul", "broken")


def statuses(root, suffix):
    ts = TraceSet.from_path(str(root))
    return {t.evaluation.status for traces in ts.traces.values() for t in traces
            if t.solution.endswith(f"_{suffix}")}


def test_bench_grades_solutions(benched):
    root = benched[0]
    assert statuses(root, "torch") == {EvaluationStatus.PASSED}
    assert statuses(root, "triton") == {EvaluationStatus.PASSED}
    assert statuses(root, "planted") == {EvaluationStatus.INCORRECT_NUMERICAL}
    assert statuses(root, "broken") == {EvaluationStatus.RUNTIME_ERROR}
    ts = TraceSet.from_path(str(root))
    passed = [t for traces in ts.traces.values() for t in traces if t.is_successful()]
    assert all(t.evaluation.performance.latency_ms > 0 for t in passed)
    assert all(t.evaluation.performance.reference_latency_ms > 0 for t in passed)
    assert {s.name for ss in ts.solutions.values() for s in ss} >= {
        "fused_add_rmsnorm_h576_torch", "fused_add_rmsnorm_h576_triton"}


def test_report_table_and_plot(benched, tmp_path):
    found = rows(TraceSet.from_path(str(benched[0])))
    text = table(found)
    assert "fused_add_rmsnorm_h576" in text and "INCORRECT_NUMERICAL" in text
    png = plot(found, tmp_path / "report.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_apply_never_picks_a_failed_solution(benched):
    root = benched[0]
    table_ = best_per_bucket(TraceSet.from_path(str(root)), torch.device("cpu"))
    picks = {c.impl.suffix for buckets in table_.values() for c in buckets.values()}
    assert picks and not picks & {"planted", "broken"}
    assert "fused_add_rmsnorm_h576" in table_  # torch or triton passed there


def test_a_failed_solution_stays_out_when_registered(benched):
    """Registered again in this process, the planted solution is still never picked: its
    traces failed, whatever its speed."""
    ts = TraceSet.from_path(str(benched[0]))
    for t in ts.traces["fused_add_rmsnorm_h576"]:
        assert t.solution != "fused_add_rmsnorm_h576_planted" or not t.is_successful()
    register(Impl("fused_add_rmsnorm", "planted", "python", planted_norm, "planted, wrong"))
    try:
        table_ = best_per_bucket(ts, torch.device("cpu"))
    finally:
        unregister("fused_add_rmsnorm", "planted")
    assert all(c.impl.suffix != "planted" for c in table_["fused_add_rmsnorm_h576"].values())


def test_apply_keeps_greedy_outputs(benched, smollm2_dir):
    from minisgl.llm import LLM

    root, prompts, greedy, plain = benched
    register(Impl("fused_add_rmsnorm", "planted", "python", planted_norm, "planted, wrong"))
    try:
        llm = LLM(str(smollm2_dir), trace_set=str(root), max_running_reqs=8)
        # On a CPU every pick is the torch code, the engine's own default: apply swaps nothing,
        # so it installs nothing and every op runs as written.
        assert hook.installed is None
        kept = llm.generate(prompts, greedy, use_tqdm=False)
        applier = Applier.load(root, torch.device("cpu"))
        assert applier.table and not applier.swapped_ops
        # Marked as swaps, each traced op runs through its solution's canonical call
        # (Runtime.run -> impl.fn -> OpSpec.finish), the path a GPU swap takes.
        calls = Counter()

        def counted(impl: Impl) -> Impl:
            def fn(*args):
                calls[impl.op] += 1
                return impl.fn(*args)
            return replace(impl, fn=fn)

        applier.table = {name: {b: replace(c, impl=counted(c.impl), is_default=False)
                                for b, c in buckets.items()}
                         for name, buckets in applier.table.items()}
        assert applier.swapped_ops >= {"fused_add_rmsnorm", "silu_and_mul", "store_kv"}
        hook.install(Runtime(applier=applier))
        try:
            applied = llm.generate(prompts, greedy, use_tqdm=False)
        finally:
            hook.install(None)
            llm.shutdown()
    finally:
        unregister("fused_add_rmsnorm", "planted")
    assert [o["token_ids"] for o in kept] == [o["token_ids"] for o in plain]
    assert [o["token_ids"] for o in applied] == [o["token_ids"] for o in plain]
    assert calls["fused_add_rmsnorm"] and calls["silu_and_mul"], calls  # the swaps ran


def test_ops_apply_does_not_swap_skip_the_dispatch():
    """With an applier only, an op it never swaps runs as written without a look at its call
    (the lookup alone cost 4% of the H200's throughput); a swapped op is looked up."""
    seen = []

    class OnlySilu:
        swapped_ops = frozenset({"silu_and_mul"})

        def choose(self, spec, call):
            seen.append(spec.op)
            return None

    class AsWritten:  # fused_add_rmsnorm, with what the registry's rule would run
        name = "fused_add_rmsnorm"

        def pick(self, *args):
            return lambda *a: "as written"

    rt = Runtime(applier=OnlySilu())
    # arguments no call site accepts: the dispatch must not even look at them
    assert rt.run(AsWritten(), ("not", "tensors")) == "as written"
    assert seen == []
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(3))
    gate, up = x.chunk(2, dim=-1)
    out = rt.run(ops.silu_and_mul, (x,))
    assert seen == ["silu_and_mul"] and torch.equal(out, torch.nn.functional.silu(gate) * up)
    # a recorder sees every op, so with one the filter is off
    assert Runtime(recorder=object(), applier=OnlySilu()).only_ops is None


def test_apply_needs_benchmarked_traces(tmp_path):
    with pytest.raises(ValueError, match="bench"):
        Applier.load(tmp_path, torch.device("cpu"))


def test_rope_tolerance_admits_rounding_once_and_fails_a_wrong_rotation():
    """bf16 RoPE: the reference rounds each product (like HF), the fused kernel only their sum.
    On the H200 that alone failed atol 1e-2 on 1 element of 33 million; the op's wider atol
    admits it, while a rotation by the wrong position still fails."""
    from minisgl.layers.rotary import RotaryEmbedding
    from minisgl.ops.rope import rotate
    from minisgl.trace.bench import compare
    from minisgl.trace.ops import OPS

    gen = torch.Generator().manual_seed(7)
    tokens, heads, dim = 4096, 16, 128
    x = torch.randn(tokens, heads, dim, generator=gen).to(torch.bfloat16)  # a normalised head
    positions = torch.randint(0, 4096, (tokens,), generator=gen)
    rope = RotaryEmbedding(dim, 4096, 1e6)
    cos, sin = (t[positions].to(torch.bfloat16) for t in (rope._cos, rope._sin))
    want = rotate(x, cos, sin)  # three roundings
    half = dim // 2
    pair = torch.cat((-x[..., half:], x[..., :half]), dim=-1).float()
    once = (x.float() * cos.float()[:, None] + pair * sin.float()[:, None]).to(torch.bfloat16)
    diff = (once.float() - want.float()).abs()
    assert (diff > 1e-2 + 1e-2 * want.float().abs()).any()  # FlashInfer-Bench's default fails it
    spec = OPS["rope"]
    assert compare(spec, (once,), (want,))[0] == EvaluationStatus.PASSED
    shifted = rotate(x, *(t[(positions + 1) % 4096].to(torch.bfloat16)
                          for t in (rope._cos, rope._sin)))
    assert compare(spec, (shifted,), (want,))[0] == EvaluationStatus.INCORRECT_NUMERICAL


def test_a_swap_must_beat_the_engine_default_clearly():
    """A solution replaces the engine's own code only when it is more than MIN_GAIN faster; the
    default, when chosen, is marked so that the engine runs its own call, not the wrapper."""
    torch_, triton_ = find("silu_and_mul", "torch"), find("silu_and_mul", "triton")
    default = Choice(triton_, 1.0, 1.0)
    barely = Choice(torch_, 1.0 * (1 - MIN_GAIN / 2), 1.0)
    clearly = Choice(torch_, 1.0 * (1 - 2 * MIN_GAIN), 1.0)
    assert pick([barely, default], "triton") == Choice(triton_, 1.0, 1.0, is_default=True)
    assert pick([default, clearly], "triton") == clearly
    assert pick([barely], "triton") == barely  # the default failed there: the fastest that passed
    assert pick([default, barely], None) == barely  # no default (attention): the fastest
    assert pick([default], "triton").is_default


def test_engine_default_on_a_cpu_is_the_torch_code():
    cpu = torch.device("cpu")
    assert {engine_default(op, cpu) for op in ("rmsnorm", "silu_and_mul", "rope", "store_kv",
                                              "embedding", "moe", "sampling")} == {"torch"}
    assert engine_default("attention", cpu) is None


def test_a_hook_may_run_another_implementation():
    """The registry's hook decides what runs: here it replaces silu_and_mul with a counted copy of
    its reference and leaves every other op to the rule; the caller gets the replacement's
    result, and the op's own code is not called."""
    ran = Counter()

    def replacement(x):
        ran["replacement"] += 1
        return 2 * ops.silu_and_mul.reference(x)

    class Swap:
        def run(self, op, args):
            fn = replacement if op is ops.silu_and_mul else op.pick(*args)
            return fn(*args)

    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(5))
    want = ops.silu_and_mul.reference(x)
    hook.install(Swap())
    try:
        doubled = ops.silu_and_mul(x)
        normed = ops.rms_norm(x, torch.ones(8), 1e-6)
    finally:
        hook.install(None)
    assert torch.equal(doubled, 2 * want) and ran == {"replacement": 1}
    assert torch.equal(normed, ops.rms_norm.reference(x, torch.ones(8), 1e-6))
    assert torch.equal(ops.silu_and_mul(x), want)  # uninstalled: the rule again
