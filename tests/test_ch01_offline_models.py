"""Chapter 1: finding model folders, and the bundled offline models."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from minisgl.models.config import ModelConfig
from minisgl.utils import hf, offline
from minisgl.utils.hf import default_model, resolve_model
from minisgl.utils.misc import MinisglError
from minisgl.utils.offline import QWEN3_ID, SMOLLM2_ID


@pytest.fixture
def no_hub(monkeypatch, tmp_path):
    """Offline, with an empty Hugging Face cache, so only local and bundled models count."""
    import huggingface_hub.constants

    monkeypatch.setenv("MINISGL_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "hf-cache"


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """An empty MINISGL_CACHE_DIR that reuses the wheels already downloaded (no network)."""
    wheels = offline.wheels_dir()
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    for wheel in wheels.glob("*.whl"):
        (cache / "wheels" / wheel.name).symlink_to(wheel)
    monkeypatch.setenv("MINISGL_CACHE_DIR", str(cache))
    return cache


def _fake_hf_cache(root: Path, repo_id: str, source: Path) -> Path:
    """The layout huggingface_hub uses: models--org--name/{refs/main, snapshots/<commit>/...}."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(source / name, snapshot / name)
    (snapshot / "model.safetensors").write_bytes(b"")  # only its presence is checked
    return snapshot


# --- resolution order and errors -------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/no/such/model", "./missing-model", "~/no-such-model-here"])
def test_missing_path_is_one_clear_error(path):
    with pytest.raises(MinisglError, match="does not exist") as err:
        resolve_model(path)
    assert path in str(err.value) and "\n" not in str(err.value)


def test_folder_without_config_json(tmp_path):
    with pytest.raises(MinisglError) as err:
        resolve_model(str(tmp_path))
    assert str(tmp_path) in str(err.value) and "config.json" in str(err.value)


def test_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(MinisglError, match="is a file"):
        resolve_model(str(tmp_path / "config.json"))


def test_local_folder_comes_first(qwen3_dir, smollm2_dir):
    assert resolve_model(str(smollm2_dir)) == smollm2_dir.resolve()
    assert resolve_model(str(qwen3_dir), dummy_weight=True) == qwen3_dir.resolve()
    with pytest.raises(MinisglError, match="safetensors.*--dummy-weight"):
        resolve_model(str(qwen3_dir))  # config and tokenizer, but no weights


def test_unknown_model_offline_names_every_place_tried(no_hub):
    with pytest.raises(MinisglError) as err:
        resolve_model("some-org/no-such-model")
    message = str(err.value)
    for place in (
        "local folder",
        "HF cache",
        "hub download (skipped: offline)",
        "bundled",
        SMOLLM2_ID,
    ):
        assert place in message
    assert "\n" not in message


def test_not_an_id_nor_a_folder():
    with pytest.raises(MinisglError, match="neither an existing folder nor a Hugging Face id"):
        resolve_model("no such model!")


def test_bundled_models_by_their_hf_ids(no_hub, smollm2_dir, qwen3_dir):
    assert resolve_model(SMOLLM2_ID) == smollm2_dir
    assert resolve_model(SMOLLM2_ID.lower()) == smollm2_dir  # hub ids ignore case
    assert resolve_model(QWEN3_ID, dummy_weight=True) == qwen3_dir
    assert (qwen3_dir / "config.json").is_file() and (qwen3_dir / "tokenizer.json").is_file()
    assert not list(qwen3_dir.glob("*.safetensors"))


def test_qwen3_without_dummy_weight_says_what_to_do(no_hub):
    with pytest.raises(MinisglError, match="not available offline.*--dummy-weight"):
        resolve_model(QWEN3_ID)


def test_hf_cache_comes_before_bundled(no_hub, smollm2_dir):
    snapshot = _fake_hf_cache(no_hub, SMOLLM2_ID, smollm2_dir)
    assert resolve_model(SMOLLM2_ID) == snapshot


def test_incomplete_hf_cache_is_skipped(no_hub, qwen3_dir):
    snapshot = _fake_hf_cache(no_hub, "some-org/partial", qwen3_dir)
    (snapshot / "model.safetensors").unlink()
    assert resolve_model("some-org/partial", dummy_weight=True) == snapshot
    with pytest.raises(MinisglError, match="no \\*.safetensors"):
        resolve_model("some-org/partial")


def test_hub_attempt_fails_fast(monkeypatch, tmp_path):
    import huggingface_hub.constants

    monkeypatch.delenv("MINISGL_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    start = time.monotonic()
    with pytest.raises(MinisglError, match="hub download"):
        resolve_model("minisgl-tests/surely-no-such-repo-3f9a")
    assert time.monotonic() - start < 30


def test_default_model_falls_back_to_smollm2_in_one_line(
    no_hub, smollm2_dir, qwen3_dir, capsys
):
    chosen = default_model()
    assert chosen == (SMOLLM2_ID, smollm2_dir, True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and QWEN3_ID in lines[0] and SMOLLM2_ID in lines[0]
    assert default_model(dummy_weight=True) == (QWEN3_ID, qwen3_dir, False)


def test_default_model_prefers_cached_qwen3(no_hub, qwen3_dir):
    snapshot = _fake_hf_cache(no_hub, QWEN3_ID, qwen3_dir)
    assert default_model() == (QWEN3_ID, snapshot, False)


# --- the bundled SmolLM2 ---------------------------------------------------------------------------


def test_smollm2_folder_is_complete(smollm2_dir):
    assert hf.missing_parts(smollm2_dir, dummy_weight=False) == []
    cfg = ModelConfig.from_path(smollm2_dir)
    assert cfg.architecture == "LlamaForCausalLM"
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_qo_heads, cfg.num_kv_heads) == (30, 576, 9, 3)
    assert cfg.vocab_size == 49152 and cfg.tie_word_embeddings and cfg.rms_norm_eps == 1e-5
    raw = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in raw
    tok_cfg = json.loads((smollm2_dir / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in tok_cfg["chat_template"]


def test_smollm2_loads_in_transformers_and_knows_paris(smollm2_dir):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tokenizer.encode(text, add_special_tokens=False)])
    out = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=False
    )
    answer = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert answer.startswith("The capital of France is Paris.")


@pytest.mark.slow  # over 12 s on an idle 2-core machine
def test_interrupted_conversion_leaves_no_folder(fresh_cache, monkeypatch, capfd):
    dest = offline.bundled_dir(SMOLLM2_ID)
    stale = dest.parent / f".tmp-{dest.name}-killed"  # what a killed process leaves behind
    stale.mkdir(parents=True)

    def crash(gguf):
        raise RuntimeError("simulated crash while dequantising")

    with monkeypatch.context() as patch:
        patch.setattr(offline, "_load_gguf", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            offline.prepare_smollm2()
    assert not dest.exists()

    capfd.readouterr()
    assert offline.prepare_smollm2() == dest
    err = capfd.readouterr().err
    assert f"preparing {SMOLLM2_ID}" in err and "4/4" in err
    assert hf.missing_parts(dest, dummy_weight=False) == []
    assert sorted(p.name for p in dest.parent.iterdir()) == [f".{dest.name}.lock", dest.name]

    with monkeypatch.context() as patch:  # the second time it is already there: nothing is built
        patch.setattr(offline, "_load_gguf", crash)
        assert offline.prepare_smollm2() == dest
    assert "preparing" not in capfd.readouterr().err


def test_two_processes_preparing_at_once_build_once(fresh_cache, monkeypatch):
    builds = []
    real_build = offline._build_qwen3

    def counting_build(*args):
        builds.append(1)
        real_build(*args)

    monkeypatch.setattr(offline, "_build_qwen3", counting_build)
    results: list[Path] = []
    workers = [
        threading.Thread(target=lambda: results.append(offline.prepare_qwen3())) for _ in range(2)
    ]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(results) == 2 and results[0] == results[1] and len(builds) == 1
    assert hf.missing_parts(results[0], dummy_weight=True) == []


# --- the offline Qwen3-0.6B ------------------------------------------------------------------------


def test_qwen3_config_facts(qwen3_dir):
    cfg = ModelConfig.from_path(qwen3_dir)
    assert cfg.architecture == "Qwen3ForCausalLM" and cfg.use_qk_norm
    assert (cfg.hidden_size, cfg.intermediate_size, cfg.num_layers) == (1024, 3072, 28)
    assert (cfg.num_qo_heads, cfg.num_kv_heads, cfg.head_dim) == (16, 8, 128)
    assert cfg.vocab_size == 151936 and cfg.tie_word_embeddings and not cfg.attention_bias
    assert (
        cfg.rope_theta == 1e6 and cfg.rms_norm_eps == 1e-6 and cfg.max_position_embeddings == 40960
    )
    assert (cfg.bos_token_id, cfg.torch_dtype) == (151643, "bfloat16")
    assert cfg.eos_token_ids == (151645, 151643)  # generation_config.json's, then config.json's
    raw = json.loads((qwen3_dir / "config.json").read_text())
    assert raw["use_sliding_window"] is False and raw["hidden_act"] == "silu"
    gen = json.loads((qwen3_dir / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [151645, 151643]


def test_qwen3_config_loads_in_transformers(qwen3_dir):
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(qwen3_dir)
    assert cfg.model_type == "qwen3" and cfg.num_hidden_layers == 28 and cfg.head_dim == 128


# A long build step (dequantising SmolLM2 took 36 s on a busy 2-core machine) redraws its bar
# while it runs, so a first start-up never goes quiet. The step waits for the redraws itself.
class _Stream:
    """sys.stderr stand-in that counts what tqdm writes."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def _wait_for(condition, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def progress(monkeypatch):
    stream = _Stream()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr(offline._Progress, "TICK_S", 0.05, raising=False)
    bar = offline._Progress("preparing a model", steps=2)
    yield bar, stream
    bar.bar.close()


def test_a_long_step_redraws_its_bar_while_it_runs(progress):
    bar, stream = progress
    with bar.step("load and dequantise"):
        before = len(stream.writes)
        _wait_for(lambda: len(stream.writes) >= before + 3, "the bar stayed still during the step")
    assert "load and dequantise" in stream.writes[-1]


def test_the_redraws_stop_with_the_step(progress):
    bar, stream = progress
    with bar.step("extract GGUF"):
        pass
    assert not [t for t in threading.enumerate() if t.name == "minisgl-progress-tick"]
    with bar.step("save safetensors"):  # and start again with the next one
        before = len(stream.writes)
        _wait_for(lambda: len(stream.writes) >= before + 2, "the second step's bar stayed still")
    assert not [t for t in threading.enumerate() if t.name == "minisgl-progress-tick"]


def test_a_failing_step_stops_redrawing_and_shows_what_it_wrote(progress):
    bar, stream = progress
    with pytest.raises(RuntimeError, match="corrupt"), bar.step("load and dequantise"):
        before = len(stream.writes)
        _wait_for(lambda: len(stream.writes) >= before + 2, "the bar stayed still")
        import sys

        print("transformers: bad tensor", file=sys.stderr)  # held back, shown on failure
        raise RuntimeError("corrupt")
    assert not [t for t in threading.enumerate() if t.name == "minisgl-progress-tick"]
    assert "transformers: bad tensor" in "".join(stream.writes)
