"""What the engine needs to know to build itself: model, dtype, device, KV pool size."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.quant import check_quantization
from minisgl.utils.cpu import preferred_cpu_dtype

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
# >>> ch11


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str | torch.dtype, device: str) -> torch.dtype:
    """"auto" is bfloat16 on a GPU and cpu_dtype() on a CPU."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else cpu_dtype()
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be auto or one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]
# <<< ch11


def cpu_dtype() -> torch.dtype:
    """What "auto" means on a CPU. float32 by default: a CPU without native bf16 arithmetic runs
    bf16 slower than fp32. From chapter 20 the CPU decides (utils/cpu.py)."""
    dtype = torch.float32
    # >>> ch20
    dtype = preferred_cpu_dtype()
    # <<< ch20
    return dtype


@dataclass
class EngineConfig:
    model_path: str  # a resolved local Hugging Face folder (see utils/hf.py)
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    dummy_weight: bool = False
    attention_backend: str = "auto"  # auto: Triton on a GPU (chapter 20), torch on a CPU
    page_size: int = 1
    num_pages: int | None = None  # None: size the pool from memory_ratio (GPU) or cpu_kv_bytes
    memory_ratio: float = 0.9  # GPU: share of the memory left after the weights used for KV
    cpu_kv_bytes: int = 1 << 30  # CPU: KV pool size when num_pages is not given
    max_running_reqs: int = 256
    max_seq_len: int | None = None  # None: the model's max_position_embeddings
    seed: int | None = None  # sampling seed; None draws one
    # >>> ch15
    # Decode batches up to this size run as CUDA graphs (GPU and Triton attention only).
    # None: 256, or max_running_reqs when smaller; 0: never.
    cuda_graph_max_bs: int | None = None
    # <<< ch15
    # >>> ch17
    tp_size: int = 1  # tensor-parallel ranks; each process says which one it is (distributed/)
    # <<< ch17
    # >>> ch21
    trace_dir: str | None = None  # record FlashInfer Trace workloads into this folder (ch. 21)
    # <<< ch21
    # >>> ch22
    trace_set: str | None = None  # apply the fastest verified solutions of this set (ch. 22)
    # <<< ch22
    # >>> ch24
    # KV bytes per token that another pool of the same number of pages needs (a draft model's,
    # chapter 24): the pool size from memory_ratio / cpu_kv_bytes leaves room for it.
    extra_kv_bytes_per_token: int = 0
    # <<< ch24
    # >>> ch26
    # Store the decoder's linear weights in 8 bits (chapter 26): "int8" (weight-only) or "fp8"
    # (e4m3 weights and per-token activations, GPUs with FP8 only); None keeps `dtype`.
    quantization: str | None = None
    # <<< ch26

    def __post_init__(self) -> None:
        if self.page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {self.page_size}")
        if self.num_pages is not None and self.num_pages < 1:
            raise ValueError(f"num_pages must be >= 1, got {self.num_pages}")
        if not 0 < self.memory_ratio <= 1:
            raise ValueError(f"memory_ratio must be in (0, 1], got {self.memory_ratio}")
        if self.max_running_reqs < 1:
            raise ValueError(f"max_running_reqs must be >= 1, got {self.max_running_reqs}")
        # >>> ch15
        if self.cuda_graph_max_bs is not None and self.cuda_graph_max_bs < 0:
            raise ValueError(f"cuda_graph_max_bs must be >= 0, got {self.cuda_graph_max_bs}")
        # <<< ch15
        # >>> ch17
        if self.tp_size < 1:
            raise ValueError(f"tp_size must be >= 1, got {self.tp_size}")
        # <<< ch17
        # >>> ch26
        self.quantization = check_quantization(self.quantization, self.device)
        # <<< ch26
