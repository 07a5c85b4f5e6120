"""Chapter 20, for the CPU: a whole decode step in one C++ call (engine/cpu_step.py). External
reference: Hugging Face transformers' logits on the same random weights at every position the
step computed; and the engine op by op (its cpu_step switched off) on the same requests."""

from __future__ import annotations

import shutil

import pytest
import torch
from test_ch03_models import save_random_hf_model

from minisgl.core import SamplingParams
from minisgl.engine.cpu_step import CpuStepRunner
from minisgl.kernel import cpu_ops
from minisgl.layers.cpu_pack import sub_ops
from minisgl.layers.linear import _Linear
from minisgl.ops import hook
from minisgl.ops.cpu_impls import pack_weight
from minisgl.scheduler import Scheduler, SchedulerConfig

pytestmark = pytest.mark.skipif(shutil.which("g++") is None or not cpu_ops.available(),
                                reason="needs g++ to build csrc/cpu_ops.cpp")
VOCAB = 320  # test_ch03_models.TINY
CASES = {  # the three ways a dense decoder of models/base.py differs
    "llama": ("llama", "LlamaForCausalLM", dict(tie_word_embeddings=False)),
    "qwen2-bias": ("qwen2", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    "qwen3-qknorm": ("qwen3", "Qwen3ForCausalLM", dict(tie_word_embeddings=True, head_dim=16)),
}
PROMPT_LENS = (3, 11, 6)  # mixed lengths: pages of 4 tokens end mid-prompt


def scheduler(model_dir, dtype: str = "float32") -> Scheduler:
    return Scheduler(SchedulerConfig(model_path=str(model_dir), page_size=4, num_pages=64,
                                     max_running_reqs=4, seed=0, dtype=getattr(torch, dtype)))


def decode_logits(sched: Scheduler, prompts: list[list[int]], steps: int):
    """Greedy generation; every decode step's (positions, logits) as the engine computed them,
    and each request's tokens."""
    engine, seen = sched.engine, []
    original = engine._logits

    def record(batch, last):
        logits = original(batch, last)
        if not batch.is_prefill:
            seen.append(([r.uid for r in batch.reqs], batch.positions.tolist(), logits.clone()))
        return logits

    engine._logits = record
    uids = [sched.add_request(p, SamplingParams(max_tokens=steps, ignore_eos=True))
            for p in prompts]
    tokens = {uid: [] for uid in uids}
    while sched.has_work:
        for out in sched.step():
            assert out.error is None, out.error
            tokens[out.uid] += [out.token] if out.token is not None else []
    return seen, [tokens[uid] for uid in uids], uids


def random_prompts(seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (n,), generator=gen).tolist() for n in PROMPT_LENS]


@pytest.mark.parametrize("case", sorted(CASES))
def test_step_logits_match_hf_at_every_decoded_position(case, tmp_path):
    model_type, arch, overrides = CASES[case]
    hf = save_random_hf_model(tmp_path, model_type, arch, seed=3, **overrides)
    sched = scheduler(tmp_path)
    assert sched.engine.cpu_step is not None
    prompts = random_prompts(len(case))
    seen, tokens, uids = decode_logits(sched, prompts, steps=5)
    assert len(seen) == 4  # the first token comes from the prefill
    sequences = {uid: torch.tensor(p + t) for uid, p, t in zip(uids, prompts, tokens)}
    with torch.no_grad():
        want = {uid: hf(seq[None]).logits[0] for uid, seq in sequences.items()}
    for step_uids, positions, logits in seen:
        for row, (uid, pos) in enumerate(zip(step_uids, positions)):
            torch.testing.assert_close(logits[row], want[uid][pos], rtol=1e-4, atol=1e-4)
            assert int(logits[row].argmax()) == sequences[uid][pos + 1]  # greedy


@pytest.mark.parametrize("dtype,atol", [("float32", 1e-5), ("bfloat16", 0.1)])
def test_step_gives_the_op_by_op_engines_logits(dtype, atol, tmp_path):
    model_type, arch, overrides = CASES["qwen3-qknorm"]
    save_random_hf_model(tmp_path, model_type, arch, seed=4, **overrides)
    prompts = random_prompts(9)
    runs = []
    for use_step in (True, False):
        sched = scheduler(tmp_path, dtype)
        qkv = sched.engine.model.model.layers.ops[0].self_attn.qkv_proj.weight
        # where the library has panels for the dtype (AVX-512), both paths read them
        assert cpu_ops.is_panels(qkv) == (getattr(torch, dtype) in cpu_ops.panel_dtypes())
        if not use_step:
            sched.engine.cpu_step = None
        else:
            assert sched.engine.cpu_step is not None
        runs.append(decode_logits(sched, prompts, steps=6))
    (fast, fast_tokens, _), (slow, slow_tokens, _) = runs
    if dtype == "float32":
        assert fast_tokens == slow_tokens
    for (_, pos_a, a), (_, pos_b, b) in zip(fast, slow, strict=True):
        if dtype == "bfloat16" and pos_a != pos_b:
            break  # a bf16 near-tie may pick another token: the batches part ways here
        assert pos_a == pos_b
        torch.testing.assert_close(a, b, rtol=0, atol=atol)


def test_build_says_why_not_and_a_trace_runs_op_by_op(tmp_path, monkeypatch):
    model_type, arch, overrides = CASES["llama"]
    save_random_hf_model(tmp_path, model_type, arch, seed=5, **overrides)
    engine = scheduler(tmp_path).engine
    args = (engine.model, engine.kv_cache, engine.page_table, engine.attn_backend,
            engine.config.dtype)
    runner, why = CpuStepRunner.build(*args)
    assert runner is not None and why == ""

    class Batch:
        is_prefill, size, input_ids = False, 2, [7, 8]

    assert runner.can_run(Batch())
    # >>> ch21
    monkeypatch.setattr(hook, "installed", object())  # a trace watches the ops
    assert not runner.can_run(Batch())
    monkeypatch.setattr(hook, "installed", None)
    # <<< ch21
    proj = next(op for op in sub_ops(engine.model) if isinstance(op, _Linear))
    w = proj.weight  # plain, or in panels where the library has them (AVX-512)
    shape = (w.shape[0] * w.shape[2], w.shape[1] * w.shape[3]) if cpu_ops.is_panels(w) \
        else tuple(w.shape)
    proj.weight = pack_weight(torch.randn(shape, dtype=w.dtype))  # oneDNN's opaque layout
    assert CpuStepRunner.build(*args) == (None, "a weight is packed for oneDNN, quantized, "
                                                "biased or shaped unlike the config")
    assert CpuStepRunner.build(*args[:3], object(), args[4])[0] is None  # not the cpu backend
    assert CpuStepRunner.build(*args[:4], torch.float16)[0] is None


@pytest.mark.parametrize("field,value,error", [
    ("out_loc", 10**6, "K/V slot is outside the pool"),
    ("out_loc", -1, "K/V slot is outside the pool"),
    ("positions", 10**7, "outside the rotary tables"),
    ("kv_lens", 10**5, "outside the page table"),
])
def test_a_corrupted_batch_is_refused_not_read(field, value, error, tmp_path):
    """What C++ would read out of bounds with is checked there first, and raised here."""
    model_type, arch, overrides = CASES["llama"]
    save_random_hf_model(tmp_path, model_type, arch, seed=6, **overrides)
    sched = scheduler(tmp_path)
    runner = sched.engine.cpu_step
    original = runner.run

    def corrupt(batch, last):
        if field == "kv_lens":
            sched.engine.attn_backend.prepare_metadata(batch)
            batch.attn_metadata.kv_lens[-1] = value
            runner.backend.prepare_metadata = lambda b: None  # keep the corrupted tables
        else:
            getattr(batch, field)[-1] = value
        return original(batch, last)

    runner.run = corrupt
    sched.add_request(random_prompts(1)[1], SamplingParams(max_tokens=3, ignore_eos=True))
    with pytest.raises(IndexError, match=error):
        while sched.has_work:
            sched.step()
