"""Chapter 2: every layer against an external reference (Hugging Face modules or plain torch)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import LlamaConfig
from transformers.models.llama import modeling_llama as hf_llama

from minisgl import ops
from minisgl.layers import (
    AttentionLayer,
    LinearColParallelMerged,
    LinearQKVMerged,
    ParallelLMHead,
    RMSNorm,
    RMSNormFused,
    RotaryEmbedding,
    VocabParallelEmbedding,
)
from minisgl.models.config import ModelConfig
from minisgl.ops import Impl, Op


def _randn(*shape, dtype=torch.float32, seed=None):
    gen = torch.Generator().manual_seed(seed) if seed is not None else None
    return torch.randn(*shape, generator=gen).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_matches_hf(dtype):
    hidden = 96
    ours = RMSNorm(hidden, 1e-6)
    ours.weight = 1 + 0.1 * _randn(hidden, dtype=dtype)
    ref = hf_llama.LlamaRMSNorm(hidden, eps=1e-6).to(dtype)
    ref.weight.data.copy_(ours.weight)
    x = 3 * _randn(7, hidden, dtype=dtype)
    with torch.no_grad():
        expected = ref(x)
    if dtype == torch.bfloat16:
        assert torch.equal(ours.forward(x), expected)  # same op order: bit for bit
    else:
        torch.testing.assert_close(ours.forward(x), expected, rtol=0, atol=1e-6)


def test_fused_rms_norm_adds_the_residual_first():
    norm = RMSNormFused(64, 1e-5)
    norm.weight = _randn(64)
    x, residual = _randn(5, 64), _randn(5, 64)
    out, new_residual = norm.forward(x, residual)
    total = x + residual
    expected = total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(new_residual, total)
    torch.testing.assert_close(out, expected)
    out_first, residual_first = norm.forward(x, None)  # first layer: input is the residual
    torch.testing.assert_close(residual_first, x)


def test_merged_linears_equal_separate_projections():
    hidden, head_dim, nq, nkv = 48, 8, 6, 2
    qkv = LinearQKVMerged(hidden, head_dim, nq, nkv, bias=True)
    qkv.weight, qkv.bias = _randn((nq + 2 * nkv) * head_dim, hidden), _randn((nq + 2 * nkv) * head_dim)
    x = _randn(9, hidden)
    wq, wk, wv = qkv.weight.split([nq * head_dim, nkv * head_dim, nkv * head_dim])
    bq, bk, bv = qkv.bias.split([nq * head_dim, nkv * head_dim, nkv * head_dim])
    expected = torch.cat([F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)], dim=-1)
    torch.testing.assert_close(qkv.forward(x), expected)

    gate_up = LinearColParallelMerged(hidden, [32, 32])
    gate_up.weight = _randn(64, hidden)
    assert gate_up.bias is None
    torch.testing.assert_close(gate_up.forward(x), x @ gate_up.weight.T)


def test_mlp_activation_matches_hf_llama_mlp():
    cfg = LlamaConfig(hidden_size=32, intermediate_size=80)
    ref = hf_llama.LlamaMLP(cfg)
    for p in ref.parameters():
        p.data.normal_()
    x = _randn(4, 32)
    gate_up = torch.cat([ref.gate_proj.weight, ref.up_proj.weight], dim=0)
    ours = F.linear(ops.silu_and_mul(F.linear(x, gate_up)), ref.down_proj.weight)
    with torch.no_grad():
        torch.testing.assert_close(ours, ref(x), rtol=1e-5, atol=1e-5)


ROPE_CASES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 256,
               "rope_theta": 500000.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
             "rope_theta": 1000000.0},
}


@pytest.mark.parametrize("kind", sorted(ROPE_CASES))
def test_rotary_matches_hf(kind):
    head_dim, max_pos = 64, 1024
    hf_cfg = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=max_pos, rope_parameters=ROPE_CASES[kind],
                         architectures=["LlamaForCausalLM"])
    cfg = ModelConfig.from_dict(hf_cfg.to_dict())
    assert cfg.rope_scaling.kind == kind
    ours = RotaryEmbedding(head_dim, max_pos, cfg.rope_theta, cfg.rope_scaling)
    ref = hf_llama.LlamaRotaryEmbedding(hf_cfg)
    positions = torch.randint(0, max_pos, (13,))
    q, k = _randn(13, 4, head_dim), _randn(13, 2, head_dim)
    cos, sin = ref(q, positions[None])
    q_ref, k_ref = hf_llama.apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None],
                                                 cos, sin)
    q_out, k_out = ours.forward(positions, q, k)
    torch.testing.assert_close(q_out, q_ref[0].transpose(0, 1), rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(k_out, k_ref[0].transpose(0, 1), rtol=1e-5, atol=2e-5)


def test_embedding_and_tied_lm_head():
    embed = VocabParallelEmbedding(100, 16)
    embed.weight = _randn(100, 16)
    ids = torch.randint(0, 100, (11,))
    torch.testing.assert_close(embed.forward(ids), embed.weight[ids])
    tied = ParallelLMHead(100, 16, tied_to=embed)
    assert "weight" not in tied.state_dict()  # nothing to load for a tied head
    h = _randn(3, 16)
    torch.testing.assert_close(tied.forward(h), h @ embed.weight.T)
    untied = ParallelLMHead(100, 16)
    assert set(untied.state_dict()) == {"weight"}


def _reference_attention(q, k, v):
    """Causal softmax attention written out with an explicit mask; [T, H, D] inputs."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    scores = torch.einsum("thd,shd->hts", q, k) / q.shape[-1] ** 0.5
    mask = torch.ones(q.shape[0], q.shape[0], dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.einsum("hts,shd->thd", scores.softmax(-1), v)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_attention_layer_is_causal_gqa_with_rope(qk_norm):
    nq, nkv, d, t = 6, 2, 16, 10
    rotary = RotaryEmbedding(d, 64, 10000.0)
    norms = (RMSNorm(d, 1e-6), RMSNorm(d, 1e-6)) if qk_norm else (None, None)
    for n in norms:
        if n is not None:
            n.weight = 1 + 0.1 * _randn(d)
    layer = AttentionLayer(0, nq, nkv, d, rotary, *norms)
    qkv = _randn(t, (nq + 2 * nkv) * d)
    positions = torch.arange(t)
    q, k, v = qkv.split([nq * d, nkv * d, nkv * d], dim=-1)
    q, k, v = q.reshape(t, nq, d), k.reshape(t, nkv, d), v.reshape(t, nkv, d)
    if qk_norm:
        q, k = norms[0].forward(q), norms[1].forward(k)
    q, k = rotary.forward(positions, q, k)
    expected = _reference_attention(q, k, v).reshape(t, nq * d)
    torch.testing.assert_close(layer.forward(qkv, positions), expected, rtol=1e-5, atol=1e-5)
    # causality: changing the last token changes nothing before it
    qkv2 = qkv.clone()
    qkv2[-1] += 1.0
    torch.testing.assert_close(layer.forward(qkv2, positions)[:-1], expected[:-1],
                               rtol=1e-5, atol=1e-5)
    assert ("q_norm.weight" in layer.state_dict()) == qk_norm


# ---------------------------------------------------------------------------------------------
# The op registry: one rule picks an implementation for every call


@pytest.fixture
def toy_op():
    """An op of the test's own (x -> 2x) with no faster implementation yet."""
    op = Op("toy_double", lambda x: 2 * x)
    yield op
    del ops.ALL[op.name]


def test_the_rule_takes_the_first_faster_implementation_that_takes_the_call(toy_op):
    """Faster implementations are tried in order: one that does not take the call, or is not
    available in this process, is passed over; when none runs, the torch reference does."""
    ran = []

    def fake(name):
        return lambda x: ran.append(name) or 2 * x

    toy_op.add(Impl("off", fake("off"), takes=lambda x: True, available=lambda: False))
    toy_op.add(Impl("one", fake("one"), takes=lambda x: x.numel() == 1))
    toy_op.add(Impl("any", fake("any"), takes=lambda x: True))
    one, three = _randn(1, seed=1), _randn(3, seed=2)
    assert toy_op.kind_for(one) == "one" and toy_op.kind_for(three) == "any"
    assert torch.equal(toy_op(one), 2 * one) and torch.equal(toy_op(three), 2 * three)
    assert ran == ["one", "any"]
    assert toy_op.implementation("torch") is toy_op.reference
    assert toy_op.implementation("off") is toy_op.faster[0].fn  # by name, whatever the rule says
    with pytest.raises(KeyError, match="no 'cuda' implementation"):
        toy_op.implementation("cuda")
    with pytest.raises(ValueError, match="declared twice"):
        Op("toy_double", lambda x: x)


def test_without_a_taker_the_reference_runs(toy_op):
    toy_op.add(Impl("gpu", lambda x: x))  # the default condition: a tensor on a GPU
    x = _randn(4, seed=3)
    assert toy_op.pick(x) is toy_op.reference and toy_op.kind_for(x) == "torch"
    assert torch.equal(toy_op(x), 2 * x)


def test_every_op_runs_its_torch_reference_on_cpu_tensors():
    """On a CPU no faster implementation takes a call: each op's result is its reference's."""
    gen = torch.Generator().manual_seed(4)
    x, r, w = (torch.randn(3, 64, generator=gen) for _ in range(3))
    calls = {
        ops.rms_norm: (x, w[0], 1e-6),
        ops.fused_add_rms_norm: (x, r, w[0], 1e-6),
        ops.silu_and_mul: (x,),
        ops.linear: (x[:1].contiguous(), w, None),  # one contiguous token: still torch here
    }
    for op, args in calls.items():
        # >>> ch20
        if op.kind_for(*args) == "cpp":  # chapter 20's C++ versions for the CPU: to fp32 rounding
            torch.testing.assert_close(op(*args), op.reference(*args), rtol=1e-5, atol=1e-5)
            continue
        # <<< ch20
        assert op.kind_for(*args) == "torch", op.name
        got, want = op(*args), op.reference(*args)
        if not isinstance(got, tuple):
            got, want = (got,), (want,)
        assert all(torch.equal(g, e) for g, e in zip(got, want, strict=True)), op.name
