"""Chapter 3: our models against Hugging Face transformers on identical weights (fp32, CPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from minisgl.models.weight import load_model
from minisgl.utils.misc import MinisglError

TINY = dict(vocab_size=320, hidden_size=64, intermediate_size=112, num_hidden_layers=3,
            num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512)
CASES = {
    "llama-untied": ("llama", "LlamaForCausalLM", dict(tie_word_embeddings=False)),
    "llama-tied-mha": ("llama", "LlamaForCausalLM",
                       dict(tie_word_embeddings=True, num_key_value_heads=8)),
    "qwen2-bias": ("qwen2", "Qwen2ForCausalLM", dict(tie_word_embeddings=False)),
    "qwen3-qknorm": ("qwen3", "Qwen3ForCausalLM", dict(tie_word_embeddings=True, head_dim=16)),
}


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Fresh random values everywhere, biases and norm scales included (HF inits them to 0/1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.1 * noise if "norm" in name else 0.05 * noise)


def save_random_hf_model(path: Path, model_type: str, arch: str, seed: int = 0, **overrides):
    config = AutoConfig.for_model(model_type, architectures=[arch], **{**TINY, **overrides})
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config).eval()
    _randomize(model, seed)
    model.save_pretrained(path)
    return model


def max_logit_diff(hf_model, ours, ids: torch.Tensor) -> float:
    with torch.no_grad():
        expected = hf_model(ids[None]).logits[0].float()
    got = ours.forward(ids, torch.arange(len(ids)))
    return (expected - got).abs().max().item()


@pytest.mark.parametrize("case", sorted(CASES))
def test_tiny_models_match_hf(case, tmp_path):
    model_type, arch, overrides = CASES[case]
    hf_model = save_random_hf_model(tmp_path, model_type, arch, **overrides)
    ours = load_model(tmp_path)
    assert type(ours).__name__ == arch
    for seed in range(3):
        ids = torch.randint(0, TINY["vocab_size"], (5 + 17 * seed,),
                            generator=torch.Generator().manual_seed(seed))
        assert max_logit_diff(hf_model, ours, ids) <= 1e-4


def test_output_indices_select_rows(tmp_path):
    save_random_hf_model(tmp_path, "llama", "LlamaForCausalLM")
    ours = load_model(tmp_path)
    ids = torch.randint(0, TINY["vocab_size"], (9,))
    full = ours.forward(ids, torch.arange(9))
    picked = ours.forward(ids, torch.arange(9), output_indices=torch.tensor([8, 3]))
    torch.testing.assert_close(picked, full[[8, 3]])


def test_bundled_smollm2_matches_hf(smollm2_dir):
    # 30 real layers in fp32: summation order (merged q/k/v GEMM, SDPA kernels) differs from HF,
    # and random tokens give logits of magnitude ~30, so allow 1e-3 (about 3e-5 relative).
    hf_model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    ours = load_model(smollm2_dir)
    ids = torch.randint(0, 49152, (40,), generator=torch.Generator().manual_seed(7))
    assert max_logit_diff(hf_model, ours, ids) <= 1e-3


@pytest.mark.slow  # over 12 s on an idle 2-core machine
def test_qwen3_0_6b_real_config_cut_to_4_layers(qwen3_dir, tmp_path):
    raw = json.loads((qwen3_dir / "config.json").read_text())
    assert raw["hidden_size"] == 1024 and raw["num_hidden_layers"] == 28
    raw["num_hidden_layers"] = 4
    config = AutoConfig.for_model(**{k: v for k, v in raw.items() if k != "torch_dtype"})
    torch.manual_seed(1)
    hf_model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    _randomize(hf_model, 1)
    hf_model.save_pretrained(tmp_path)
    ours = load_model(tmp_path)
    ids = torch.randint(0, 151936, (24,), generator=torch.Generator().manual_seed(3))
    assert max_logit_diff(hf_model, ours, ids) <= 1e-3
    # --dummy-weight on the same architecture: runs, finite, and deterministic
    dummy = load_model(tmp_path, dummy_weight=True)
    again = load_model(tmp_path, dummy_weight=True)
    logits = dummy.forward(ids, torch.arange(len(ids)))
    assert torch.isfinite(logits).all()
    torch.testing.assert_close(logits, again.forward(ids, torch.arange(len(ids))))


def test_unsupported_architecture_is_one_clear_error(tmp_path):
    save_random_hf_model(tmp_path, "llama", "LlamaForCausalLM")
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["architectures"] = ["GPT2LMHeadModel"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(MinisglError, match="unsupported model architecture 'GPT2LMHeadModel'"):
        load_model(tmp_path)


def test_truncated_safetensors_is_one_clear_error(tmp_path):
    save_random_hf_model(tmp_path, "llama", "LlamaForCausalLM")
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(MinisglError, match=r"model\.safetensors is not a readable safetensors"):
        load_model(tmp_path)


def test_missing_weights_and_missing_files_are_clear_errors(tmp_path):
    save_random_hf_model(tmp_path, "llama", "LlamaForCausalLM")
    only_config = tmp_path / "only_config"
    only_config.mkdir()
    shutil.copy(tmp_path / "config.json", only_config / "config.json")
    with pytest.raises(MinisglError, match="no \\*.safetensors files.*--dummy-weight"):
        load_model(only_config)
    raw = json.loads((tmp_path / "config.json").read_text())
    raw["num_hidden_layers"] = 4  # the checkpoint has only 3 layers
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(MinisglError, match="missing.*layers.3"):
        load_model(tmp_path)
    with pytest.raises(MinisglError, match="no config.json"):
        load_model(tmp_path / "does-not-exist")


# Loading says what it loads before it starts (the longest quiet stretch of a server's start-up)
# and what it got when done.
@pytest.fixture
def weight_logs(monkeypatch):
    import logging

    from minisgl.models import weight

    if hasattr(weight, "logger"):  # INFO, whatever an earlier test set
        monkeypatch.setattr(weight.logger, "level", logging.INFO)


def _lines(err: str, words: str) -> list[int]:
    return [i for i, line in enumerate(err.splitlines()) if words in line]


def test_loading_logs_files_and_size_before_and_parameters_after(smollm2_dir, weight_logs,
                                                                  capfd):
    load_model(smollm2_dir)
    err = capfd.readouterr().err
    size_mib = sum(f.stat().st_size for f in smollm2_dir.glob("*.safetensors")) / 2**20
    start = _lines(err, f"loading weights: {smollm2_dir.name}, 1 safetensors file "
                        f"({size_mib:.0f} MiB), as float32 on cpu ...")
    done = _lines(err, "weights ready: 134.5M parameters in ")
    assert len(start) == 1 and len(done) == 1 and start[0] < done[0], err


def test_random_weights_log_the_same_two_lines(tmp_path, weight_logs, capfd):
    save_random_hf_model(tmp_path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         head_dim=16)
    model = load_model(tmp_path, dummy_weight=True, dtype=torch.bfloat16)
    count = sum(t.numel() for _, t in model.named_weights())
    err = capfd.readouterr().err
    start = _lines(err, f"random weights (--dummy-weight) for {tmp_path.name}, bfloat16 on cpu")
    done = _lines(err, f"weights ready: {count / 1e6:.1f}M parameters")
    assert len(start) == 1 and len(done) == 1 and start[0] < done[0], err


def test_the_first_line_is_out_before_the_checkpoint_is_read(tmp_path, monkeypatch,
                                                             weight_logs, capfd):
    from minisgl.models import weight

    save_random_hf_model(tmp_path, "llama", "LlamaForCausalLM")
    seen: list[str] = []

    def reading(*args, **kwargs):
        seen.append(capfd.readouterr().err)  # what was on stderr when the reading began
        raise MinisglError("stop here")

    monkeypatch.setattr(weight, "load_hf_weights", reading)
    with pytest.raises(MinisglError, match="stop here"):
        load_model(tmp_path)
    assert len(seen) == 1 and "loading weights: " in seen[0], seen
