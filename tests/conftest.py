"""Shared pytest fixtures and markers.

- `smollm2_dir`, `qwen3_dir`: the bundled offline model folders, prepared once in the cache
  (`MINISGL_CACHE_DIR`, default ~/.cache/minisgl); the first run converts SmolLM2 (~30 s).
- `hf_greedy`: Hugging Face greedy generation on SmolLM2, the reference for engine outputs.
- `@pytest.mark.gpu`: the test needs CUDA and is skipped when no GPU is present.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# Without a GPU the Triton kernels (chapter 20) run under Triton's interpreter, chosen by
# TRITON_INTERPRET when triton is imported. Test modules import transformers' model code, which
# imports torch._dynamo and with it triton, so the variable is set here, before collection.
if not Path("/proc/driver/nvidia/version").exists():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# >>> ch20
# The tests compare the engine with Hugging Face in fp32, on any CPU: "auto" means float32 here
# unless a test says otherwise (chapter 20's test of the CPU's own default unsets it).
os.environ.setdefault("MINISGL_CPU_DTYPE", "float32")
# <<< ch20


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch  # only when a GPU test was collected: importing torch costs seconds

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    from minisgl.utils.offline import prepare_smollm2

    return prepare_smollm2()


@pytest.fixture(scope="session")
def qwen3_dir() -> Path:
    from minisgl.utils.offline import prepare_qwen3

    return prepare_qwen3()


# Varied chat prompts for end-to-end comparisons (short and long, code, lists, other languages).
CHAT_PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three prime numbers greater than 10.",
    "Explain in one sentence what a GPU is.",
    "Translate 'good morning' into Spanish.",
    "What is 17 times 23?",
    "Write a Python function that reverses a string.",
    "Name the planets of the solar system in order.",
    "Give me a tip for sleeping better.",
    "Who wrote Romeo and Juliet?",
    "Describe the color blue to someone who cannot see.",
    "What does HTTP stand for?",
    "Summarize the water cycle in two sentences.",
    "Suggest a name for a friendly robot.",
    "Why is the sky blue? Answer briefly, please, in a way a child would understand.",
    "Hi!",
]


class HFGreedy:
    """Hugging Face transformers' greedy generation, one prompt at a time: the reference that
    every engine test compares token sequences against.

    HF's answers are memoised on disk (keyed by the weights file and the request), because the
    chapter checks run the same tests in several fresh processes and HF generation dominates
    their time. They stay HF's outputs: nothing of ours is ever stored there."""

    def __init__(self, model_dir: Path) -> None:
        import torch
        import transformers
        from transformers import AutoTokenizer

        from minisgl.env import load_env

        self.torch = torch
        self.model_dir = model_dir
        self._model = None
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        weights = sorted(model_dir.glob("*.safetensors"))
        self._identity = [transformers.__version__, torch.__version__,
                          *[(w.name, w.stat().st_size) for w in weights]]
        self._memo_dir = load_env().cache_dir / "hf_greedy"
        self._memo_dir.mkdir(parents=True, exist_ok=True)

    @property
    def model(self):
        if self._model is None:  # loaded only when an answer is not memoised yet
            from transformers import AutoModelForCausalLM

            self._model = AutoModelForCausalLM.from_pretrained(
                self.model_dir, dtype=self.torch.float32).eval()
        return self._model

    def chat_ids(self, prompt: str) -> list[int]:
        text = self.tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                                  tokenize=False, add_generation_prompt=True)
        return self.tokenizer.encode(text, add_special_tokens=False)

    def generate(self, ids: list[int], max_new_tokens: int) -> list[int]:
        """Greedy tokens after ids, stopping at EOS (which is included) or max_new_tokens."""
        import hashlib

        key = json.dumps([self._identity, ids, max_new_tokens])
        path = self._memo_dir / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"
        if path.is_file():
            return json.loads(path.read_text())
        with self.torch.no_grad():
            out = self.model.generate(self.torch.tensor([ids]), max_new_tokens=max_new_tokens,
                                      do_sample=False)
        tokens = out[0, len(ids):].tolist()
        tmp = path.with_suffix(f".tmp{id(self)}")
        tmp.write_text(json.dumps(tokens))
        tmp.replace(path)  # atomic: a concurrent reader never sees half a file
        return tokens


@pytest.fixture(scope="session")
def hf_greedy(smollm2_dir) -> HFGreedy:
    return HFGreedy(smollm2_dir)


class RunningServer:
    """`python -m minisgl` in a subprocess (chapter 14), and small HTTP helpers for tests.

    Only the standard library talks to it here (no minisgl import), so this file stays
    importable in the trees of chapters that have no server yet."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None,
                 startup_timeout: float = 300.0, api_key: str | None = None) -> None:
        self.api_key = api_key  # sent with every request when the server wants one
        with socket.socket() as s:  # a free port (a tiny race with other programs is fine)
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.NamedTemporaryFile("w+", prefix="minisgl-server-", suffix=".log")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "minisgl", "--port", str(self.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self._wait_healthy(startup_timeout)
        self.model_name = self.get("/v1/models")[1]["data"][0]["id"]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}:\n"
                                   f"{self.log_text()}")
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the server did not become healthy in {timeout} s:\n"
                           f"{self.log_text()}")

    def log_text(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def request(self, method: str, path: str, body: bytes | dict | None = None,
                timeout: float = 120.0) -> tuple[int, object]:
        """(status, parsed JSON body or raw text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if isinstance(body, dict) else body
            headers = {"Content-Type": "application/json"} if data else {}
            if self.api_key is not None:
                headers["Authorization"] = f"Bearer {self.api_key}"
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read().decode()
            try:
                return resp.status, json.loads(raw)
            except json.JSONDecodeError:
                return resp.status, raw
        finally:
            conn.close()

    def get(self, path: str) -> tuple[int, object]:
        return self.request("GET", path)

    def post(self, path: str, body: bytes | dict) -> tuple[int, object]:
        return self.request("POST", path, body)

    def health(self, timeout: float = 60.0) -> dict:
        """/health's numbers as they are now: taken by the scheduler after this call began.
        While the scheduler is in the middle of a step, /health answers with the numbers it had
        before, and numbers less than 50 ms old are not asked for again (`stats_age_s` says how
        old they are): ask until they are younger than this call. "Less than 0.1 s old" was not
        enough: a request sent and streaming within 50 ms of the last /health (a fast engine)
        still read the numbers from before it, running_requests 0."""
        start = time.monotonic()
        deadline = start + timeout
        while True:
            status, body = self.get("/health")
            assert status == 200, body
            if body.get("stats_age_s", 0) < time.monotonic() - start:  # type: ignore[union-attr]
                return body  # type: ignore[return-value]
            assert time.monotonic() < deadline, f"/health never fresh: {body}"
            time.sleep(0.02)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="session")
def smollm2_server(smollm2_dir):
    """One server on the bundled SmolLM2 for every API test (starting one takes ~10 s): two
    tokenizer workers, so requests really spread over several processes."""
    server = RunningServer(["--model", str(smollm2_dir), "--num-tokenizer", "2",
                            "--num-pages", "8192", "--max-seq-len", "1024"])
    yield server
    server.stop()
