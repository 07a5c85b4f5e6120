"""Chapter 1: settings, model resolution and the two bundled offline models.

The first run builds the bundled models into the cache (a progress bar per model, ~30 s for
SmolLM2's GGUF conversion); later runs find them there at once.
"""

from __future__ import annotations

import time

from minisgl.env import load_env
from minisgl.models.config import ModelConfig
from minisgl.utils.hf import default_model, resolve_model
from minisgl.utils.misc import run_main
from minisgl.utils.offline import QWEN3_ID, SMOLLM2_ID


def summary(cfg: ModelConfig) -> str:
    return (
        f"{cfg.architecture}: {cfg.num_layers} layers, hidden {cfg.hidden_size}, "
        f"ffn {cfg.intermediate_size}, heads {cfg.num_qo_heads}/{cfg.num_kv_heads} (q/kv) x "
        f"{cfg.head_dim}, vocab {cfg.vocab_size}, rope_theta {cfg.rope_theta:g}, "
        f"tied={cfg.tie_word_embeddings}, qk_norm={cfg.use_qk_norm}, {cfg.torch_dtype}"
    )


def main() -> None:
    env = load_env()
    print(f"env: cache_dir={env.cache_dir} log_level={env.log_level} offline={env.offline} "
          f"disable_cuda_ext={env.disable_cuda_ext}")  # fmt: skip
    for model_id, dummy in ((SMOLLM2_ID, False), (QWEN3_ID, True)):
        start = time.perf_counter()
        path = resolve_model(model_id, dummy_weight=dummy)
        print(f"{model_id} -> {path} ({time.perf_counter() - start:.1f} s)")
        print(f"  {summary(ModelConfig.from_path(path))}")
    chosen = default_model()
    note = " (fallback: Qwen3-0.6B weights are not available)" if chosen.is_fallback else ""
    print(f"default model: {chosen.name}{note}")


if __name__ == "__main__":
    began = time.perf_counter()
    run_main(main)
    print(f"took {time.perf_counter() - began:.1f} s")
