"""Chapter 16: the official offline API's keyword names, and its benchmark's workload.

The official mini-sglang's benchmark/offline/bench.py calls
LLM("Qwen/Qwen3-0.6B", max_seq_len_override=4096, max_extend_tokens=16384, cuda_graph_max_bs=256,
page_size=256); its keywords are read from the official repository itself when a clone is here.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_ch03_models import save_random_hf_model

from minisgl.benchmark.offline import OFFICIAL_ENGINE, main, official_workload
from minisgl.env import load_env
from minisgl.llm import LLM
from minisgl.llm.llm import OFFICIAL_KWARGS, config_kwargs

OFFICIAL_REPO = Path("/work/.mirror/sgl-project+mini-sglang/repo")
OFFICIAL_COMMIT = "20fcd7f"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, smollm2_dir):
    """A tiny random Qwen3 whose vocabulary holds bench.py's token ids (0-10000), with SmolLM2's
    tokenizer files so that LLM can load it."""
    path = tmp_path_factory.mktemp("qwen3")
    save_random_hf_model(path, "qwen3", "Qwen3ForCausalLM", tie_word_embeddings=True,
                         head_dim=16, num_hidden_layers=2, vocab_size=10240,
                         max_position_embeddings=8192)
    for file in Path(smollm2_dir).iterdir():
        if file.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(file, path / file.name)
    return path


def test_official_names_map_onto_ours_and_ours_pass_through():
    assert config_kwargs(OFFICIAL_ENGINE) == dict(max_seq_len=4096, max_prefill_length=16384,
                                                  cuda_graph_max_bs=256, page_size=256)
    assert config_kwargs(dict(max_running_req=8, num_page_override=64, use_dummy_weight=True,
                              memory_ratio=0.5, cache_type="naive")) == \
        dict(max_running_reqs=8, num_pages=64, dummy_weight=True, memory_ratio=0.5,
             cache_type="naive")
    assert config_kwargs(dict(max_seq_len=100, max_prefill_length=7)) == \
        dict(max_seq_len=100, max_prefill_length=7)


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp_info=None), "does not support 'tp_info'"),
    (dict(cuda_graph_bs=[1, 2]), "ladder"),
    (dict(max_seq_len_overide=4096), "unexpected keyword argument 'max_seq_len_overide'"),
    (dict(model_path="x"), "unexpected keyword argument 'model_path'"),
    (dict(max_seq_len=10, max_seq_len_override=20), "another name for the same setting"),
])
def test_unknown_and_unsupported_keywords_are_a_type_error(kwargs, message):
    with pytest.raises(TypeError, match=message):
        config_kwargs(kwargs)


def official_bench_keywords() -> set[str]:
    """The keywords of the LLM(...) call in the official bench.py, from the official clone."""
    if not OFFICIAL_REPO.exists():
        pytest.skip("no clone of the official mini-sglang here")
    source = subprocess.run(
        ["git", "-C", str(OFFICIAL_REPO), "show", f"{OFFICIAL_COMMIT}:benchmark/offline/bench.py"],
        capture_output=True, text=True, check=True).stdout
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call)
             and getattr(node.func, "id", None) == "LLM"]
    assert len(calls) == 1
    return {kw.arg for kw in calls[0].keywords}


def test_the_official_bench_call_is_accepted():
    keywords = official_bench_keywords()
    assert keywords == set(OFFICIAL_ENGINE)
    assert set(config_kwargs({k: 1 for k in keywords})) <= \
        {"max_seq_len", "max_prefill_length", "cuda_graph_max_bs", "page_size"}


def test_llm_takes_official_keywords(tiny_model):
    llm = LLM(str(tiny_model), device="cpu", max_running_req=4, num_page_override=40,
              **OFFICIAL_ENGINE)
    sched = llm.scheduler
    assert sched.engine.max_seq_len == 4096 and sched.engine.page_size == 256
    assert sched.config.max_prefill_length == 16384 and sched.config.max_running_reqs == 4
    assert sched.engine.num_pages == 40
    out = llm.generate([[5, 6, 7]], set_params(4), use_tqdm=False)
    assert len(out[0]["token_ids"]) == 4
    llm.shutdown()


def test_starting_the_engine_leaves_the_callers_random_numbers_alone(tiny_model, monkeypatch):
    """bench.py seeds `random`, builds the LLM, then draws its workload: the start-up must not
    move that stream, even when something it calls draws from it (as a library did on the H200)."""
    import random

    from minisgl.scheduler import Scheduler

    def greedy_init(self, *args, **kwargs):
        random.random()  # a library drawing from the global stream
        real_init(self, *args, **kwargs)

    real_init = Scheduler.__init__
    monkeypatch.setattr(Scheduler, "__init__", greedy_init)
    random.seed(1234)
    expected = [random.randint(0, 10**6) for _ in range(5)]
    random.seed(1234)
    llm = LLM(str(tiny_model), device="cpu", num_page_override=40, **OFFICIAL_ENGINE)
    assert [random.randint(0, 10**6) for _ in range(5)] == expected
    llm.shutdown()


def set_params(n: int):
    from minisgl.core import SamplingParams

    return SamplingParams(max_tokens=n, ignore_eos=True)


def test_dummy_weight_from_the_environment(monkeypatch):
    monkeypatch.setenv("MINISGL_DUMMY_WEIGHT", "1")
    assert load_env().dummy_weight
    monkeypatch.setenv("MINISGL_DUMMY_WEIGHT", "no")
    assert not load_env().dummy_weight
    monkeypatch.setenv("MINISGL_DUMMY_WEIGHT", "2")
    with pytest.raises(ValueError, match="MINISGL_DUMMY_WEIGHT"):
        load_env()


def test_the_official_workload():
    work = official_workload()
    assert len(work.prompts) == 256 and work.output_tokens == 133_966  # the figure
    assert all(100 <= len(p) <= 1024 for p in work.prompts)
    assert all(100 <= n <= 1024 for n in work.output_lens)
    assert all(0 <= t <= 10000 for p in work.prompts for t in p)
    assert work.temperature == 0.6
    small = official_workload(4, 0.05)
    assert small.prompts == [p[: max(1, round(len(p) * 0.05))] for p in work.prompts[:4]]
    assert small.output_lens == [max(1, round(n * 0.05)) for n in work.output_lens[:4]]


def test_official_benchmark_runs_small_with_a_profile(tiny_model, capsys, tmp_path):
    trace = tmp_path / "trace.json"
    main(["--official", "--model", str(tiny_model), "--num-requests", "3", "--scale-lengths",
          "0.02", "--profile", "--profile-steps", "2", "--profile-trace", str(trace)])
    out = capsys.readouterr().out
    work = official_workload(3, 0.02)
    assert f"3 requests, {work.input_tokens} input and {work.output_tokens} output tokens" in out
    assert "round 1/1: minisgl" in out
    assert re.search(rf"^minisgl +{work.output_tokens} +[0-9.]+ +[0-9.]+", out, re.M)  # table
    assert "profile: 2 decode steps" in out and "GPU busy n/a (no GPU)" in out
    names = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    assert "decode_stretch" in names


@pytest.mark.parametrize("argv, message", [
    (["--official", "--num-requests", "257"], "at most 256"),
    (["--official", "--scale-lengths", "0"], "scale-lengths"),
    (["--scale-lengths", "1.5"], "scale-lengths"),
])
def test_bad_benchmark_arguments(argv, message, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert message in capsys.readouterr().err


def test_official_names_are_the_official_fields():
    """Each name we translate is a field of the official EngineConfig or SchedulerConfig."""
    if not OFFICIAL_REPO.exists():
        pytest.skip("no clone of the official mini-sglang here")
    fields = set()
    for path in ("python/minisgl/engine/config.py", "python/minisgl/scheduler/config.py"):
        source = subprocess.run(["git", "-C", str(OFFICIAL_REPO), "show",
                                 f"{OFFICIAL_COMMIT}:{path}"],
                                capture_output=True, text=True, check=True).stdout
        fields |= {node.target.id for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)}
    assert set(OFFICIAL_KWARGS) <= fields
