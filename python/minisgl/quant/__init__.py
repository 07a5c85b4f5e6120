"""Weight quantization (chapter 26): the linear layers' weights stored in 8 bits.

`--quantization int8|fp8` (LLM(..., quantization=...)) quantizes every projection of the decoder
layers once, right after the checkpoint is loaded (quantize.py: the numbers; model.py: which
layers, and the device check). Embeddings, norms and the LM head keep the model's dtype. The
multiplications themselves are ops of the registry (minisgl/ops/quant_linear.py), so a layer
never asks which kernel runs.

This module only names the choices, so that a configuration can be checked without importing
the layers (the API server's process never loads a model).
"""

from __future__ import annotations

QUANTIZATIONS = ("int8", "fp8")  # the --quantization choices, with SGLang's and vLLM's names


def check_quantization(name: str | None, device: str) -> str | None:
    """The setting, lower-cased, or ValueError naming the choices. fp8 is refused on a CPU here;
    a GPU without FP8 is refused when the model is loaded (model.py), in the engine's process."""
    if name is None:
        return None
    if not isinstance(name, str) or name.lower() not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)} (or None for "
                         f"the checkpoint's dtype), got {name!r}")
    name = name.lower()
    if name == "fp8" and not device.startswith("cuda"):
        raise ValueError("quantization 'fp8' needs a GPU with FP8 tensor cores (compute "
                         "capability 8.9 or higher, e.g. an H100/H200); on a CPU use 'int8'")
    return name
