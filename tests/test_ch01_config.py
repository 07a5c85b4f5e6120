"""Chapter 1: settings, helpers and config parsing."""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig, GenerationConfig, LlamaConfig, Qwen2Config, Qwen3Config

from minisgl.env import load_env
from minisgl.models.config import ModelConfig
from minisgl.utils import MinisglError, cdiv, div_exact
from minisgl.utils.registry import Registry


def test_env_reads_variables_at_call_time(monkeypatch, tmp_path):
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("MINISGL_LOG_LEVEL", "debug")
    monkeypatch.setenv("MINISGL_OFFLINE", "yes")
    env = load_env()
    assert env.cache_dir == tmp_path / "c" and env.log_level == "DEBUG" and env.offline
    monkeypatch.setenv("MINISGL_OFFLINE", "0")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert not load_env().offline


@pytest.mark.parametrize("name,value", [("MINISGL_OFFLINE", "maybe"),
                                        ("MINISGL_LOG_LEVEL", "LOUD")])
def test_env_rejects_bad_values(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=name):
        load_env()


def test_cdiv_and_div_exact():
    for a in range(0, 50):
        for b in range(1, 9):
            assert cdiv(a, b) == -(-a // b) == (a + b - 1) // b
    assert div_exact(48, 16) == 3
    with pytest.raises(ValueError):
        div_exact(50, 16)


def test_registry_names_what_is_supported():
    reg: Registry[type] = Registry("widget")
    reg.register("a")(int)
    assert reg.get("a") is int
    with pytest.raises(KeyError, match="unsupported widget 'b' \\(supported: a\\)"):
        reg.get("b")
    with pytest.raises(KeyError, match="twice"):
        reg.register("a")(float)


@pytest.mark.parametrize("hf_config,arch", [(LlamaConfig, "LlamaForCausalLM"),
                                            (Qwen2Config, "Qwen2ForCausalLM"),
                                            (Qwen3Config, "Qwen3ForCausalLM")])
def test_model_config_from_hf_configs(hf_config, arch):
    raw = hf_config(architectures=[arch], hidden_size=256, num_attention_heads=8,
                    num_key_value_heads=2, tie_word_embeddings=True).to_dict()
    cfg = ModelConfig.from_dict(raw)
    assert cfg.architecture == arch and cfg.num_kv_heads == 2 and cfg.tie_word_embeddings
    assert cfg.head_dim == (raw.get("head_dim") or 256 // 8)
    assert cfg.attention_bias == (arch == "Qwen2ForCausalLM")
    assert cfg.use_qk_norm == (arch == "Qwen3ForCausalLM")


@pytest.mark.parametrize("generation_eos", [None, 5, [9, 5]])
def test_eos_ids_are_those_hf_generate_stops_on(tmp_path, generation_eos):
    LlamaConfig(architectures=["LlamaForCausalLM"], eos_token_id=5).save_pretrained(tmp_path)
    (tmp_path / "generation_config.json").unlink(missing_ok=True)
    if generation_eos is None:  # HF generate then falls back to config.json's id
        hf = GenerationConfig.from_model_config(AutoConfig.from_pretrained(tmp_path))
    else:
        GenerationConfig(eos_token_id=generation_eos).save_pretrained(tmp_path)
        hf = GenerationConfig.from_pretrained(tmp_path)
    expected = hf.eos_token_id if isinstance(hf.eos_token_id, list) else [hf.eos_token_id]
    assert ModelConfig.from_path(tmp_path).eos_token_ids == tuple(expected)


def test_model_config_errors_name_the_cause(tmp_path):
    with pytest.raises(MinisglError, match="no config.json"):
        ModelConfig.from_path(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(MinisglError, match="not valid JSON"):
        ModelConfig.from_path(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    with pytest.raises(MinisglError, match="lacks the required field"):
        ModelConfig.from_path(tmp_path)
    raw = LlamaConfig(architectures=["LlamaForCausalLM"],
                      rope_scaling={"rope_type": "dynamic", "factor": 2.0}).to_dict()
    with pytest.raises(MinisglError, match="'dynamic' is not supported"):
        ModelConfig.from_dict(raw)
