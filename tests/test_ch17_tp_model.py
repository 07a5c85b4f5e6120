"""Chapter 17: tensor parallelism, checked on CPU with gloo (spawned ranks).

The reference is one rank: the same weights, whole, in this process (itself checked against
Hugging Face in chapters 3 and 18). Logits at TP=2 must equal TP=1's within 1e-5 (fp32) for tiny
random Llama, Qwen2 and Qwen3 configs, one with fewer KV heads than ranks and a vocabulary that
does not split evenly (chapter 18 adds the same check for Qwen3-MoE); greedy tokens at TP=3 must equal TP=1's on the
bundled SmolLM2 (9 query heads, 3 KV heads) for four chat prompts.
"""

from __future__ import annotations

import pytest
import torch
from test_ch03_models import save_random_hf_model

from minisgl.distributed import TPInfo, divide, kv_head_start, kv_heads_per_rank, set_tp_info
from minisgl.models.config import ModelConfig
from minisgl.models.register import create_model
from minisgl.models.shard import Cut, cut_for, read_cut
from minisgl.models.tp_logits import tp_logits
from minisgl.models.weight import load_model

CASES = {  # name: (model_type, architecture, overrides of test_ch03's TINY)
    "llama-untied-odd-vocab": ("llama", "LlamaForCausalLM",
                               dict(tie_word_embeddings=False, vocab_size=321)),
    "qwen2-bias": ("qwen2", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    "qwen3-one-kv-head": ("qwen3", "Qwen3ForCausalLM",
                          dict(tie_word_embeddings=True, head_dim=16, num_key_value_heads=1)),
}


@pytest.fixture(scope="module")
def tp2_logits(tmp_path_factory):
    """(TP=1 logits, TP=2 logits) per case; one pair of rank processes runs every case."""
    folders, inputs = {}, {}
    for i, (name, (model_type, arch, overrides)) in enumerate(CASES.items()):
        folders[name] = tmp_path_factory.mktemp(name)
        save_random_hf_model(folders[name], model_type, arch, seed=i, **overrides)
    gen = torch.Generator().manual_seed(0)
    for name in folders:
        inputs[name] = torch.randint(0, 320, (13,), generator=gen).tolist()
    split = tp_logits(list(folders.values()), list(inputs.values()), tp=2)
    out = {}
    for (name, folder), got in zip(folders.items(), split):
        ids = torch.tensor(inputs[name])
        out[name] = (load_model(folder).forward(ids, torch.arange(len(ids))), got)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_logits_at_tp2_equal_tp1(tp2_logits, name):
    whole, split = tp2_logits[name]
    assert split.shape == whole.shape  # the vocabulary padding is cut off again
    assert torch.isfinite(split).all()
    assert (whole - split).abs().max().item() <= 1e-5


def test_each_rank_holds_its_slice_only():
    """Shapes per rank, from the model built on the meta device (no memory)."""
    config = ModelConfig.from_dict({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 100, "hidden_size": 32,
        "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 1, "tie_word_embeddings": False})
    try:
        for rank in range(2):
            set_tp_info(rank, 2)
            w = create_model(config, torch.float32, "meta").state_dict()
            assert w["model.layers.0.self_attn.qkv_proj.weight"].shape == (2 * 8 + 2 * 8, 32)
            assert w["model.layers.0.self_attn.o_proj.weight"].shape == (32, 16)
            assert w["model.layers.0.mlp.gate_up_proj.weight"].shape == (48, 32)
            assert w["model.layers.0.mlp.down_proj.weight"].shape == (32, 24)
            assert w["model.embed_tokens.weight"].shape == (50, 32)
            assert w["lm_head.weight"].shape == (50, 32)
            assert w["model.norm.weight"].shape == (32,)
    finally:
        set_tp_info(0, 1)


def test_cut_rules():
    config = ModelConfig.from_dict({
        "architectures": ["Qwen3ForCausalLM"], "vocab_size": 10, "hidden_size": 8,
        "intermediate_size": 12, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 4})
    tp = TPInfo(1, 4)
    layer = "model.layers.0."
    assert cut_for(layer + "self_attn.q_proj.weight", [16, 8], config, tp) == Cut(0, 4, 4, 4)
    # 2 KV heads over 4 ranks: ranks 0, 1 share head 0 and ranks 2, 3 head 1
    assert cut_for(layer + "self_attn.k_proj.weight", [8, 8], config, tp) == Cut(0, 0, 4, 4)
    assert cut_for(layer + "self_attn.v_proj.bias", [8], config, TPInfo(2, 4)) == Cut(0, 4, 4, 4)
    assert cut_for(layer + "self_attn.o_proj.weight", [8, 16], config, tp) == Cut(1, 4, 4, 4)
    assert cut_for(layer + "mlp.down_proj.weight", [8, 12], config, tp) == Cut(1, 3, 3, 3)
    assert cut_for(layer + "mlp.experts.5.up_proj.weight", [12, 8], config, tp) == Cut(0, 3, 3, 3)
    # vocabulary 10 over 4 ranks: 3 rows each, the last rank holds 1 real row and 2 of padding
    assert cut_for("model.embed_tokens.weight", [10, 8], config, TPInfo(3, 4)) == Cut(0, 9, 1, 3)
    for whole in ("model.norm.weight", layer + "mlp.gate.weight", layer + "self_attn.q_norm.weight"):
        assert cut_for(whole, [8], config, tp) is None
    assert cut_for(layer + "self_attn.q_proj.weight", [16, 8], config, TPInfo(0, 1)) is None


class RecordingSlice:
    """A safetensors slice handle that records what is read, to prove only the slice is."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor, self.reads = tensor, []

    def __getitem__(self, index):
        self.reads.append(index)
        return self.tensor[index]


def test_read_cut_reads_only_the_slice_and_pads_with_zeros():
    full = torch.randn(10, 6)
    rows = RecordingSlice(full)
    got = read_cut(rows, Cut(0, 9, 1, 3))
    assert rows.reads == [slice(9, 10)]
    assert torch.equal(got[:1], full[9:]) and torch.equal(got[1:], torch.zeros(2, 6))
    cols = RecordingSlice(full)
    assert torch.equal(read_cut(cols, Cut(1, 2, 2, 2)), full[:, 2:4])
    assert cols.reads == [(slice(None), slice(2, 4))]


def test_splits_that_cannot_work_are_clear_errors():
    assert divide(12, 4, "x") == 3
    with pytest.raises(ValueError, match="query heads.*9.*not divisible.*2"):
        divide(9, 2, "the number of query heads")
    with pytest.raises(ValueError, match=r"KV heads \(3\) is not divisible by .* size 2"):
        kv_heads_per_rank(3, 2)
    with pytest.raises(ValueError, match="2 KV heads cannot be replicated evenly over 3"):
        kv_heads_per_rank(2, 3)
    assert kv_heads_per_rank(3, 6) == 1 and [kv_head_start(3, r, 6) for r in range(6)] == \
        [0, 0, 1, 1, 2, 2]
    assert kv_heads_per_rank(8, 2) == 4 and kv_head_start(8, 1, 2) == 4
    with pytest.raises(ValueError, match="rank 2 of 2"):
        TPInfo(2, 2)
    with pytest.raises(ValueError, match="rank 0 of 0"):
        TPInfo(0, 0)


def test_smollm2_greedy_at_tp3_equals_tp1(smollm2_dir, hf_greedy):
    from conftest import CHAT_PROMPTS

    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    prompts = [hf_greedy.chat_ids(p) for p in CHAT_PROMPTS[:4]]
    params = SamplingParams(temperature=0, max_tokens=8)
    llm = LLM(str(smollm2_dir), tp_size=3, cache_type="naive")
    try:
        split = [r["token_ids"] for r in llm.generate(prompts, params, use_tqdm=False)]
    finally:
        llm.shutdown()
    llm = LLM(str(smollm2_dir), cache_type="naive")
    whole = [r["token_ids"] for r in llm.generate(prompts, params, use_tqdm=False)]
    llm.shutdown()
    assert split == whole
    assert all(len(t) >= 1 for t in whole)
