"""Command-line flags of `python -m minisgl`, with the official mini-sglang's names.

A flag with a wrong value is a FlagError: one line and exit code 2 (as argparse's own errors),
found before anything is loaded. That includes --device cuda on a machine without CUDA.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

from minisgl.attention import BACKENDS
from minisgl.engine.config import DTYPES, default_device, resolve_dtype
from minisgl.kvcache import PREFIX_CACHE_KINDS
from minisgl.scheduler import SchedulerConfig
from minisgl.utils.hf import default_model, resolve_model

from .guard import DEFAULT_MAX_BODY_BYTES


class FlagError(Exception):
    """A flag's value cannot work; the message names the flag."""


@dataclass
class ServerArgs(SchedulerConfig):
    model_name: str = ""  # what clients call the model ("model" in requests, /v1/models)
    host: str = "127.0.0.1"  # loopback only unless --host says otherwise
    port: int = 1919
    num_tokenizer: int = 1
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger request bodies are refused (413)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.num_tokenizer < 1:
            raise ValueError(f"num_tokenizer must be >= 1, got {self.num_tokenizer}")
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minisgl",
                                description="Serve a model over an OpenAI-compatible API, or chat "
                                            "with it in the terminal (--shell).")
    p.add_argument("--model", "--model-path", dest="model", default=None,
                   help="local folder or Hugging Face id (default: Qwen/Qwen3-0.6B if its weights "
                        "are available, else the bundled HuggingFaceTB/SmolLM2-135M-Instruct)")
    p.add_argument("--shell", "--shell-mode", dest="shell", action="store_true",
                   help="chat in this terminal instead of serving HTTP")
    p.add_argument("--host", default=ServerArgs.host,
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=ServerArgs.port)
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                   help="auto: bfloat16 on a GPU, float32 on a CPU")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--tp", "--tp-size", dest="tp", type=int, default=1,
                   help="tensor parallel size (only 1 until chapter 17)")
    p.add_argument("--dummy-weight", action="store_true",
                   help="random weights with the real architecture (no checkpoint needed)")
    p.add_argument("--cache", "--cache-type", dest="cache_type", default="radix",
                   choices=PREFIX_CACHE_KINDS)
    p.add_argument("--attn", "--attention-backend", dest="attention_backend",
                   default=ServerArgs.attention_backend, choices=["auto", *sorted(BACKENDS)],
                   help="auto: triton on a GPU, torch on a CPU")
    p.add_argument("--page-size", type=int, default=ServerArgs.page_size)
    # >>> ch15
    p.add_argument("--cuda-graph-max-bs", type=int, default=None,
                   help="decode batches up to this size run as CUDA graphs (GPU with triton "
                        "attention; default 256 or --max-running-requests if smaller; 0: off)")
    # <<< ch15
    p.add_argument("--num-pages", type=int, default=None, help="KV pool size in pages")
    p.add_argument("--memory-ratio", type=float, default=ServerArgs.memory_ratio,
                   help="GPU: share of the memory left after the weights used for the KV pool")
    p.add_argument("--max-running-requests", dest="max_running_reqs", type=int,
                   default=ServerArgs.max_running_reqs)
    p.add_argument("--max-prefill-length", type=int, default=ServerArgs.max_prefill_length,
                   help="token budget of one prefill batch (longer prompts are chunked)")
    p.add_argument("--max-seq-len", type=int, default=None,
                   help="context length (default: the model's max_position_embeddings)")
    p.add_argument("--num-tokenizer", type=int, default=ServerArgs.num_tokenizer,
                   help="tokenizer worker processes")
    p.add_argument("--max-body-bytes", type=int, default=ServerArgs.max_body_bytes,
                   help="largest request body accepted, in bytes (default 8 MiB); larger ones "
                        "get 413 before they are read")
    return p


def check_device(device: str) -> None:
    """The device must exist here: found now, not after seconds of loading in a worker."""
    try:
        kind = torch.device(device)
    except RuntimeError:
        raise FlagError(f"--device {device}: not a device name (use cuda, cuda:N or cpu)") from None
    if kind.type == "cpu":
        return
    if kind.type != "cuda":
        raise FlagError(f"--device {device}: only cuda and cpu are supported")
    if not torch.cuda.is_available():
        raise FlagError(f"--device {device}: CUDA is not available on this machine "
                        f"(torch {torch.__version__}); use --device cpu")
    if kind.index is not None and kind.index >= torch.cuda.device_count():
        raise FlagError(f"--device {device}: this machine has {torch.cuda.device_count()} "
                        f"CUDA device(s)")


def parse_args(argv: list[str] | None = None) -> tuple[ServerArgs, bool]:
    """The server's settings and whether to run the shell. A bad flag value raises FlagError, a
    model that cannot be found MinisglError."""
    ns = build_parser().parse_args(argv)
    if ns.tp != 1:
        raise FlagError(f"--tp {ns.tp}: tensor parallelism arrives in chapter 17; use --tp 1")
    if ns.device is not None:
        check_device(ns.device)
    if ns.model is None:
        picked = default_model(dummy_weight=ns.dummy_weight)
        name, path = picked.name, picked.path
    else:
        name, path = ns.model, resolve_model(ns.model, dummy_weight=ns.dummy_weight)
    device = ns.device or default_device()
    try:
        args = ServerArgs(
            model_path=str(path), model_name=name, dtype=resolve_dtype(ns.dtype, device),
            device=device, dummy_weight=ns.dummy_weight, attention_backend=ns.attention_backend,
            page_size=ns.page_size, num_pages=ns.num_pages, memory_ratio=ns.memory_ratio,
            max_running_reqs=ns.max_running_reqs, max_seq_len=ns.max_seq_len,
            cache_type=ns.cache_type, max_prefill_length=ns.max_prefill_length,
            host=ns.host, port=ns.port, num_tokenizer=ns.num_tokenizer,
            max_body_bytes=ns.max_body_bytes,
            # >>> ch15
            cuda_graph_max_bs=ns.cuda_graph_max_bs,
            # <<< ch15
        )
    except ValueError as e:
        raise FlagError(str(e)) from None
    return args, ns.shell
