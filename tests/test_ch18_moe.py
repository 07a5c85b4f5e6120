"""Chapter 18: Qwen3-MoE against Hugging Face transformers on identical random weights (fp32, CPU).

Tiny random configs are written by transformers' own Qwen3MoeForCausalLM (save_pretrained, one
matrix per expert, as on the hub) and loaded by both sides: logits, greedy tokens through our
engine, and the model with its MoE blocks on the fused Triton kernels (interpreted on a CPU).
"""

from __future__ import annotations

import json

import pytest
import torch

import minisgl.kernel.triton  # noqa: F401  (sets TRITON_INTERPRET before triton loads on a CPU)
from minisgl.layers.moe import SparseMoeBlock
from minisgl.models.config import ModelConfig
from minisgl.models.register import create_model
from minisgl.models.weight import load_model
from minisgl.moe.tiny import TINY_MOE, write_tiny_qwen3_moe
from minisgl.utils.misc import MinisglError

CASES = {
    "all-moe": {},
    "mlp-only-layers": dict(mlp_only_layers=[1]),
    "sparse-step-2-unnormalised": dict(decoder_sparse_step=2, norm_topk_prob=False),
    "top-1-of-5": dict(num_experts=5, num_experts_per_tok=1, mlp_only_layers=[0, 2]),
}
MOE_LAYERS = {"all-moe": [0, 1, 2], "mlp-only-layers": [0, 2],
              "sparse-step-2-unnormalised": [1], "top-1-of-5": [1]}


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """case -> (folder, HF model), written once for the module."""
    out = {}
    for i, (case, overrides) in enumerate(CASES.items()):
        folder = tmp_path_factory.mktemp(case)
        out[case] = folder, write_tiny_qwen3_moe(folder, seed=i, **overrides)
    return out


def hf_logits(hf_model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(ids[None]).logits[0].float()


@pytest.mark.parametrize("case", sorted(CASES))
def test_logits_match_hf(case, tiny_models):
    folder, hf_model = tiny_models[case]
    ours = load_model(folder)
    assert type(ours).__name__ == "Qwen3MoeForCausalLM"
    kinds = [isinstance(layer.mlp, SparseMoeBlock) for layer in ours.model.layers]
    assert [i for i, moe in enumerate(kinds) if moe] == MOE_LAYERS[case]
    for seed in range(3):
        ids = torch.randint(0, TINY_MOE["vocab_size"], (4 + 19 * seed,),
                            generator=torch.Generator().manual_seed(seed))
        got = ours.forward(ids, torch.arange(len(ids)))
        assert (got - hf_logits(hf_model, ids)).abs().max().item() <= 1e-4


def test_model_on_fused_triton_moe_matches_hf(tiny_models):
    # Triton runs where it can: compiled on a GPU, interpreted on a CPU (it cannot read CPU
    # tensors when it compiles, so on a GPU machine the model goes to the GPU, still in fp32)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    folder, hf_model = tiny_models["mlp-only-layers"]
    ours = load_model(folder, device=device)
    for layer in ours.model.layers:
        if isinstance(layer.mlp, SparseMoeBlock):
            layer.mlp.backend = "triton"
    ids = torch.randint(0, TINY_MOE["vocab_size"], (9,), generator=torch.Generator().manual_seed(5))
    got = ours.forward(ids.to(device), torch.arange(9, device=device)).cpu()
    assert (got - hf_logits(hf_model, ids)).abs().max().item() <= 1e-4


def test_experts_are_stacked_in_hf_order(tiny_models):
    folder, hf_model = tiny_models["all-moe"]
    ours = load_model(folder)
    hf_experts = hf_model.model.layers[2].mlp.experts  # transformers 5 keeps them stacked too
    mine = ours.model.layers[2].mlp.experts
    torch.testing.assert_close(mine.gate_up_proj, hf_experts.gate_up_proj.data, rtol=0, atol=0)
    torch.testing.assert_close(mine.down_proj, hf_experts.down_proj.data, rtol=0, atol=0)


def test_missing_or_extra_expert_is_a_clear_error(tiny_models, tmp_path):
    from safetensors.torch import load_file, save_file

    folder, _ = tiny_models["all-moe"]
    weights = load_file(folder / "model.safetensors")
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    for name in ("model.layers.1.mlp.experts.3.down_proj.weight",):
        broken = {k: v for k, v in weights.items() if k != name}
        save_file(broken, tmp_path / "model.safetensors")
        with pytest.raises(MinisglError, match=r"experts\.down_proj.*missing \[3\]"):
            load_model(tmp_path)
    extra = dict(weights)
    extra["model.layers.0.mlp.experts.8.down_proj.weight"] = weights[
        "model.layers.0.mlp.experts.0.down_proj.weight"].clone()
    save_file(extra, tmp_path / "model.safetensors")
    with pytest.raises(MinisglError, match=r"unexpected \[8\]"):
        load_model(tmp_path)


def test_moe_config_fields_and_bad_values():
    base = dict(architectures=["Qwen3MoeForCausalLM"], vocab_size=10, hidden_size=8,
                intermediate_size=16, num_hidden_layers=4, num_attention_heads=2,
                num_experts_per_tok=2, moe_intermediate_size=4)
    hub = ModelConfig.from_dict({**base, "num_experts": 6, "mlp_only_layers": [3]})
    saved = ModelConfig.from_dict({**base, "num_local_experts": 6, "mlp_only_layers": [3]})
    assert hub == saved and hub.moe.num_experts == 6 and not hub.moe.norm_topk_prob
    assert [hub.is_moe_layer(i) for i in range(4)] == [True, True, True, False]
    step = ModelConfig.from_dict({**base, "num_experts": 6, "decoder_sparse_step": 2})
    assert [step.is_moe_layer(i) for i in range(4)] == [False, True, False, True]
    dense = ModelConfig.from_dict({**base, "architectures": ["Qwen3ForCausalLM"]})
    assert dense.moe is None and not dense.is_moe_layer(0)
    with pytest.raises(MinisglError, match="num_experts_per_tok"):
        ModelConfig.from_dict({**base, "num_experts": 1})
    with pytest.raises(MinisglError, match="decoder_sparse_step"):
        ModelConfig.from_dict({**base, "num_experts": 6, "decoder_sparse_step": -1})
    with pytest.raises(MinisglError, match="lacks the required field"):
        ModelConfig.from_dict({k: v for k, v in base.items() if k != "moe_intermediate_size"}
                              | {"num_experts": 6})


def test_qwen3_30b_a3b_offline_config():
    from transformers import AutoConfig

    from minisgl.utils.hf import resolve_model

    folder = resolve_model("Qwen/Qwen3-30B-A3B", dummy_weight=True)
    assert not list(folder.glob("*.safetensors"))
    hf = AutoConfig.from_pretrained(folder)
    mc = ModelConfig.from_path(folder)
    assert (mc.hidden_size, mc.num_layers, mc.num_qo_heads, mc.num_kv_heads, mc.head_dim) == \
        (hf.hidden_size, hf.num_hidden_layers, hf.num_attention_heads,
         hf.num_key_value_heads, hf.head_dim) == (2048, 48, 32, 4, 128)
    assert (mc.moe.num_experts, mc.moe.num_experts_per_tok, mc.moe.moe_intermediate_size) == \
        (hf.num_experts, hf.num_experts_per_tok, hf.moe_intermediate_size) == (128, 8, 768)
    assert mc.moe.norm_topk_prob and not mc.tie_word_embeddings and mc.vocab_size == 151936
    assert mc.rope_theta == 1e6 and mc.eos_token_ids == (151645, 151643)
    assert json.loads((folder / "config.json").read_text())["torch_dtype"] == "bfloat16"
    # the parameter count, from a model built without memory
    model = create_model(mc, torch.bfloat16, "meta")
    total = sum(t.numel() for _, t in model.named_weights())
    assert 30.4e9 < total < 30.6e9  # "30.5B" on the model card


def test_greedy_tokens_match_hf_through_the_engine(tmp_path):
    from minisgl.core import SamplingParams
    from minisgl.llm import LLM

    hf_model = write_tiny_qwen3_moe(tmp_path, seed=7, tokenizer=True, mlp_only_layers=[1])
    llm = LLM(str(tmp_path), dtype="float32", page_size=4, num_pages=256)
    try:
        prompts = ["The capital of France is", "1 2 3 4 5 6", "Mixture of experts",
                   "<|im_start|>user\nHi<|im_end|>\n"]
        params = SamplingParams(temperature=0.0, max_tokens=10, ignore_eos=True)
        results = llm.generate(prompts, params, use_tqdm=False)
        for prompt, result in zip(prompts, results):
            ids = llm.tokenizer.encode(prompt)
            with torch.no_grad():
                ref = hf_model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)),
                                        max_new_tokens=10, do_sample=False, eos_token_id=None,
                                        pad_token_id=0)
            assert result["token_ids"] == ref[0, len(ids):].tolist(), prompt
    finally:
        llm.shutdown()


def test_tensor_parallel_tp2_equals_tp1(tiny_models):
    """Experts' intermediate dimension split over two gloo ranks, output all-reduced: the logits
    equal one rank's, for the all-MoE model and the one with a dense layer."""
    from minisgl.models.tp_logits import tp_logits

    cases = ["all-moe", "mlp-only-layers"]
    gen = torch.Generator().manual_seed(7)
    ids = [torch.randint(0, TINY_MOE["vocab_size"], (11,), generator=gen) for _ in cases]
    split = tp_logits([tiny_models[c][0] for c in cases], [i.tolist() for i in ids], tp=2)
    for case, case_ids, got in zip(cases, ids, split):
        whole = load_model(tiny_models[case][0]).forward(case_ids, torch.arange(len(case_ids)))
        assert (whole - got).abs().max().item() <= 1e-5, case
