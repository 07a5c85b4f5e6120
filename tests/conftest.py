"""Shared pytest fixtures and markers.

- `smollm2_dir`, `qwen3_dir`: the bundled offline model folders, prepared once in the cache
  (`MINISGL_CACHE_DIR`, default ~/.cache/minisgl); the first run converts SmolLM2 (~30 s).
- `hf_greedy`: Hugging Face greedy generation on SmolLM2, the reference for engine outputs.
- `@pytest.mark.gpu`: the test needs CUDA and is skipped when no GPU is present.
"""

from __future__ import annotations

from pathlib import Path

import pytest


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
        import json

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
