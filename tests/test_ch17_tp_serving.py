"""Chapter 17: the server with --tp 2 (two scheduler ranks over gloo on CPU).

A tiny random Qwen3 with the real Qwen3 tokenizer (4 query heads, 2 KV heads) serves an OpenAI chat; SIGTERM stops it with no process left. Killing one rank with
SIGKILL brings the whole server down with a non-zero exit and a log line naming the rank.
"""

from __future__ import annotations

import shutil

import psutil
import pytest
from conftest import RunningServer
from test_ch03_models import save_random_hf_model

from minisgl.utils.offline import prepare_qwen3

SMALL = ["--num-pages", "2048", "--max-seq-len", "512", "--max-running-requests", "4"]


@pytest.fixture(scope="module")
def tiny_qwen3_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-qwen3")
    save_random_hf_model(folder, "qwen3", "Qwen3ForCausalLM", vocab_size=151936, head_dim=16,
                         num_attention_heads=4, tie_word_embeddings=True,
                         bos_token_id=151643, eos_token_id=151645)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(prepare_qwen3() / name, folder / name)
    return folder


def family(server: RunningServer) -> list[psutil.Process]:
    launcher = psutil.Process(server.proc.pid)
    return [launcher, *launcher.children(recursive=True)]


def titles(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(" ".join(p.cmdline()).strip())  # the title may be padded
        except psutil.Error:  # gone meanwhile
            out.append("")
    return out


def test_tp2_server_answers_openai_chat_and_stops_clean(tiny_qwen3_dir):
    from openai import OpenAI

    server = RunningServer(["--model", str(tiny_qwen3_dir), "--tp", "2", *SMALL])
    procs = family(server)
    try:
        assert {"minisgl::scheduler-rank0", "minisgl::scheduler-rank1"} <= set(titles(procs))
        client = OpenAI(base_url=f"{server.base_url}/v1", api_key="unused")
        reply = client.chat.completions.create(
            model=server.model_name, messages=[{"role": "user", "content": "Hello there"}],
            max_tokens=6, temperature=0)
        assert reply.usage.completion_tokens == 6
        assert reply.choices[0].finish_reason == "length"
        again = client.chat.completions.create(
            model=server.model_name, messages=[{"role": "user", "content": "Hello there"}],
            max_tokens=6, temperature=0)
        assert again.choices[0].message.content == reply.choices[0].message.content
    finally:
        code = server.stop()
    assert code == 0
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert alive == []


@pytest.mark.parametrize("rank", [1, 0])
def test_sigkill_of_a_rank_stops_the_server_naming_it(tiny_qwen3_dir, rank):
    server = RunningServer(["--model", str(tiny_qwen3_dir), "--tp", "2", *SMALL])
    procs = family(server)
    victim = next(p for p, title in zip(procs, titles(procs))
                  if title == f"minisgl::scheduler-rank{rank}")
    victim.kill()
    try:
        assert server.proc.wait(60) == 1  # non-zero: not a requested stop
    finally:
        server.stop()
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert alive == []
    assert f"scheduler-rank{rank} exited unexpectedly" in server.log_text()
