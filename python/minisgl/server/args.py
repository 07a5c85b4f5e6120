"""Command-line flags of `python -m minisgl`, with the official mini-sglang's names.

A flag with a wrong value is a FlagError: one line and exit code 2 (as argparse's own errors),
found before anything is loaded. That includes --device cuda on a machine without CUDA.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

import torch

from minisgl.attention import BACKENDS
from minisgl.engine.config import DTYPES, default_device, resolve_dtype
from minisgl.kvcache import PREFIX_CACHE_KINDS
from minisgl.message.dp import LOAD_BALANCE_METHODS
from minisgl.quant import QUANTIZATIONS
from minisgl.scheduler import SchedulerConfig
from minisgl.scheduler.config import SPECULATIVE_ALGORITHMS
from minisgl.speculative import resolve_draft
from minisgl.utils.hf import default_model, resolve_model

# isort: split
# (kept apart: chapter 25 adds this name to scheduler/config.py, and the trees before it drop it)
from minisgl.scheduler.config import GRAMMAR_BACKENDS

from .guard import DEFAULT_BODY_TIMEOUT_S, DEFAULT_MAX_BODY_BYTES


class FlagError(Exception):
    """A flag's value cannot work; the message names the flag."""


@dataclass
class ServerArgs(SchedulerConfig):
    model_name: str = ""  # what clients call the model ("model" in requests, /v1/models)
    host: str = "127.0.0.1"  # loopback only unless --host says otherwise
    port: int = 1919
    num_tokenizer: int = 1
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger request bodies are refused (413)
    body_timeout: float = DEFAULT_BODY_TIMEOUT_S  # seconds for a body to arrive, else 408
    served_model_name: str | None = None  # None: clients use model_name or the model's folder
    api_key: str | None = None  # None: no key needed
    log_level: str | None = None  # None: MINISGL_LOG_LEVEL, else INFO
    log_interval: float = 10.0  # seconds between two lines of the busy log; 0 turns it off
    # Ranks on several machines: each runs the launcher with the same --tp, --nnodes and
    # --dist-init-addr (host:port of node 0, reachable from the others) and its own --node-rank.
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None  # None: a free port on 127.0.0.1 (one machine)
    # >>> ch27
    # Data parallelism (chapter 27): dp_size replicas of the scheduler, each with its own KV pool
    # (and its own --tp GPUs), behind one HTTP front; the front picks each request's replica.
    dp_size: int = 1
    load_balance_method: str = "round_robin"
    # <<< ch27

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.num_tokenizer < 1:
            raise ValueError(f"num_tokenizer must be >= 1, got {self.num_tokenizer}")
        if self.max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be >= 1, got {self.max_body_bytes}")
        if not 0 < self.body_timeout < float("inf"):  # also rejects NaN
            raise ValueError(f"body_timeout must be finite and > 0 seconds, got {self.body_timeout}")
        if self.served_model_name is not None and not self.served_model_name.strip():
            raise ValueError("served_model_name must not be empty")
        if self.api_key is not None and not _is_token(self.api_key):
            raise ValueError("api_key must be 1 to 1024 printable ASCII characters without "
                             "spaces (it travels in an HTTP header)")
        if not self.log_interval >= 0:  # also rejects NaN
            raise ValueError(f"log_interval must be >= 0 seconds, got {self.log_interval}")
        if self.nnodes < 1 or not 0 <= self.node_rank < self.nnodes:
            raise ValueError(f"--node-rank {self.node_rank} is not one of --nnodes {self.nnodes}")
        if self.tp_size % self.nnodes:
            raise ValueError(f"--tp {self.tp_size} does not split evenly over {self.nnodes} nodes")
        if self.nnodes > 1 and self.dist_init_addr is None:
            raise ValueError("--nnodes > 1 needs --dist-init-addr HOST:PORT (node 0's address)")
        if self.dist_init_addr is not None:
            host, _, port = self.dist_init_addr.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535 - self.tp_size:
                raise ValueError(f"--dist-init-addr {self.dist_init_addr!r} must be HOST:PORT "
                                 f"with room for {self.tp_size} ports above PORT")
        # >>> ch27
        check_data_parallel(self)  # --dp-size and --load-balance-method (below)
        # <<< ch27

    def public_settings(self) -> dict[str, Any]:
        """The settings as JSON values, without the API key (/get_server_info shows them)."""
        settings = {k: v if isinstance(v, (str, int, float, bool, type(None))) else
                    str(v).removeprefix("torch.") for k, v in asdict(self).items()
                    if k != "api_key"}
        settings["api_key_required"] = self.api_key is not None
        return settings


def _is_token(key: str) -> bool:
    return 1 <= len(key) <= 1024 and all(33 <= ord(c) <= 126 for c in key)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minisgl",
                                description="Serve a model over an OpenAI-compatible API, or chat "
                                            "with it in the terminal (--shell).",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", "--model-path", dest="model", default=None,
                   help="local folder or Hugging Face id (None: Qwen/Qwen3-0.6B if its weights "
                        "are available, else the bundled HuggingFaceTB/SmolLM2-135M-Instruct)")
    p.add_argument("--shell", "--shell-mode", dest="shell", action="store_true",
                   help="chat in this terminal instead of serving HTTP")
    p.add_argument("--host", default=ServerArgs.host,
                   help="address to listen on (127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=ServerArgs.port, help="HTTP port")
    p.add_argument("--dtype", default="auto", choices=["auto", *DTYPES],
                   help="auto: bfloat16 on a GPU; on a CPU float32, or bfloat16 where the CPU "
                        "computes bf16 natively (chapter 20; MINISGL_CPU_DTYPE)")
    p.add_argument("--device", default=None, help="cuda or cpu (None: cuda when available)")
    p.add_argument("--tp", "--tp-size", dest="tp", type=int, default=1,
                   help="tensor parallel size: scheduler processes, each with a slice of the "
                        "model (one GPU each)")
    p.add_argument("--nnodes", type=int, default=1,
                   help="machines the --tp ranks are spread over (the same value on each)")
    p.add_argument("--node-rank", type=int, default=0,
                   help="which of the --nnodes machines this is (0 serves HTTP)")
    p.add_argument("--dist-init-addr", default=None,
                   help="HOST:PORT of node 0 where the ranks meet (None: 127.0.0.1 and a free "
                        "port, one machine); ports PORT+1.. carry rank 0's messages")
    # >>> ch27
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1,
                   help="data parallel size: scheduler replicas, each with its own KV pool (and "
                        "--tp GPUs of its own), behind one HTTP front")
    p.add_argument("--load-balance-method", default=ServerArgs.load_balance_method,
                   choices=list(LOAD_BALANCE_METHODS),
                   help="how the front picks a replica: in turn, or the one with the fewest "
                        "unfinished requests")
    # <<< ch27
    p.add_argument("--dummy-weight", action="store_true",
                   help="random weights with the real architecture (no checkpoint needed)")
    p.add_argument("--cache", "--cache-type", dest="cache_type", default="radix",
                   choices=PREFIX_CACHE_KINDS,
                   help="prefix cache: radix shares prompt prefixes between requests")
    p.add_argument("--attn", "--attention-backend", dest="attention_backend",
                   default=ServerArgs.attention_backend, choices=["auto", *sorted(BACKENDS)],
                   help="auto: triton on a GPU, torch on a CPU")
    p.add_argument("--page-size", type=int, default=ServerArgs.page_size,
                   help="tokens per KV page")
    p.add_argument("--cuda-graph-max-bs", type=int, default=None,
                   help="decode batches up to this size run as CUDA graphs (GPU with triton "
                        "attention; None: 256 or --max-running-requests if smaller; 0: off)")
    # >>> ch21
    p.add_argument("--trace-dir", default=None,
                   help="record FlashInfer Trace workloads of every op into this folder while "
                        "serving (python -m minisgl.trace bench DIR benchmarks them)")
    # <<< ch21
    # >>> ch22
    p.add_argument("--trace-set", default=None,
                   help="a benchmarked trace set: run each op with its fastest verified solution")
    # <<< ch22
    # >>> ch24
    p.add_argument("--speculative-algorithm", default=None, type=str.upper,
                   choices=list(SPECULATIVE_ALGORITHMS),
                   help="speculative decoding: NGRAM guesses from the request's own tokens, "
                        "STANDALONE from a draft model (None: off)")
    p.add_argument("--speculative-draft-model-path", default=None,
                   help="the STANDALONE draft model (a folder or HF id; the target's tokenizer)")
    p.add_argument("--speculative-num-draft-tokens", type=int,
                   default=ServerArgs.speculative_num_draft_tokens,
                   help="tokens guessed per request and step")
    # <<< ch24
    # >>> ch25
    p.add_argument("--grammar-backend", default=ServerArgs.grammar_backend,
                   choices=list(GRAMMAR_BACKENDS),
                   help="structured output (response_format, json_schema, regex, ebnf): "
                        "xgrammar compiles the grammars, none refuses them with a 400")
    # <<< ch25
    # >>> ch26
    p.add_argument("--quantization", default=None, type=str.lower, choices=list(QUANTIZATIONS),
                   help="store the decoder's linear weights in 8 bits: int8 (weight-only) or "
                        "fp8 (e4m3 weights and activations, GPUs with FP8 only); None: --dtype")
    # <<< ch26
    p.add_argument("--num-pages", type=int, default=None,
                   help="KV pool size in pages (None: from --memory-ratio on a GPU, a fixed "
                        "size on a CPU)")
    p.add_argument("--memory-ratio", type=float, default=ServerArgs.memory_ratio,
                   help="GPU: share of the memory left after the weights used for the KV pool")
    p.add_argument("--max-running-requests", dest="max_running_reqs", type=int,
                   default=ServerArgs.max_running_reqs, help="largest decode batch")
    p.add_argument("--max-prefill-length", type=int, default=ServerArgs.max_prefill_length,
                   help="token budget of one prefill batch (longer prompts are chunked)")
    p.add_argument("--max-seq-len", type=int, default=None,
                   help="context length (None: the model's max_position_embeddings)")
    p.add_argument("--num-tokenizer", type=int, default=ServerArgs.num_tokenizer,
                   help="tokenizer worker processes")
    p.add_argument("--max-body-bytes", type=int, default=ServerArgs.max_body_bytes,
                   help="largest request body accepted, in bytes (8 MiB); larger ones get 413 "
                        "before they are read")
    p.add_argument("--body-timeout", type=float, default=ServerArgs.body_timeout,
                   help="seconds a request body may take to arrive after its headers; a slower "
                        "one gets 408 and its connection is closed")
    p.add_argument("--served-model-name", default=None,
                   help="the model's name in requests and replies (None: the --model value; "
                        "its folder is accepted too)")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on every endpoint but /health "
                        "(None: no key)")
    p.add_argument("--log-level", default=None, choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   type=str.upper, help="log level of every process (None: MINISGL_LOG_LEVEL, "
                                        "else INFO; WARNING in --shell)")
    p.add_argument("--log-interval", type=float, default=ServerArgs.log_interval,
                   help="seconds between two lines of the busy log (decode throughput, running "
                        "and waiting requests, KV usage), written only while busy; 0: off")
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


# >>> ch27
def check_data_parallel(args: ServerArgs) -> None:
    """The replicas must fit this machine: a GPU per rank on CUDA, a core per process on a CPU.
    A ValueError names the flag (the launcher reports it as a flag error). Here with the other
    flag checks rather than in dp.py beside the replicas: ServerArgs runs it, and dp.py names
    ServerArgs in its annotations, so the two modules would import each other."""
    import os  # here, not at the top: the trees before chapter 27 have no use for it

    if args.dp_size < 1:
        raise ValueError(f"--dp-size must be >= 1, got {args.dp_size}")
    if args.load_balance_method not in LOAD_BALANCE_METHODS:
        raise ValueError(f"--load-balance-method must be one of "
                         f"{', '.join(LOAD_BALANCE_METHODS)}, got {args.load_balance_method!r}")
    if args.dp_size > 1 and args.nnodes > 1:
        raise ValueError("--dp-size > 1 runs its replicas on this machine; for replicas on "
                         "several machines, start one server on each and put sglang-router in "
                         "front (docs/chapters/ch27.md)")
    units = args.dp_size * args.tp_size // args.nnodes  # processes on this machine
    if args.device.startswith("cuda"):
        if args.dp_size > 1 and args.device != "cuda":
            raise ValueError(f"--dp-size places replica i on the GPUs from cuda:{args.tp_size}*i "
                             f"on; give --device cuda, not {args.device} (CUDA_VISIBLE_DEVICES "
                             f"picks the GPUs)")
        if units > (gpus := torch.cuda.device_count()):
            raise ValueError(f"--dp-size {args.dp_size} x --tp {args.tp_size} needs {units} "
                             f"GPUs on this machine; it has {gpus}")
    elif units > (cores := os.cpu_count() or 1):
        raise ValueError(f"--dp-size {args.dp_size} x --tp {args.tp_size} needs {units} "
                         f"processes with a core each; this machine has {cores} cores")


# <<< ch27
def parse_args(argv: list[str] | None = None) -> tuple[ServerArgs, bool]:
    """The server's settings and whether to run the shell. A bad flag value raises FlagError, a
    model that cannot be found MinisglError."""
    ns = build_parser().parse_args(argv)
    if ns.device is not None:
        check_device(ns.device)
    if ns.model is None:
        picked = default_model(dummy_weight=ns.dummy_weight)
        name, path = picked.name, picked.path
    else:
        name, path = ns.model, resolve_model(ns.model, dummy_weight=ns.dummy_weight)
    device = ns.device or default_device()
    # >>> ch24
    if ns.speculative_draft_model_path is not None:  # found now, as --model is
        ns.speculative_draft_model_path = resolve_draft(ns.speculative_draft_model_path,
                                                        ns.dummy_weight)
    # <<< ch24
    try:
        args = ServerArgs(
            model_path=str(path), model_name=name, dtype=resolve_dtype(ns.dtype, device),
            device=device, dummy_weight=ns.dummy_weight, attention_backend=ns.attention_backend,
            page_size=ns.page_size, num_pages=ns.num_pages, memory_ratio=ns.memory_ratio,
            max_running_reqs=ns.max_running_reqs, max_seq_len=ns.max_seq_len,
            cache_type=ns.cache_type, max_prefill_length=ns.max_prefill_length,
            host=ns.host, port=ns.port, num_tokenizer=ns.num_tokenizer,
            max_body_bytes=ns.max_body_bytes, body_timeout=ns.body_timeout,
            served_model_name=ns.served_model_name,
            api_key=ns.api_key, log_level=ns.log_level, log_interval=ns.log_interval,
            cuda_graph_max_bs=ns.cuda_graph_max_bs,
            # >>> ch21
            trace_dir=ns.trace_dir,
            # <<< ch21
            # >>> ch22
            trace_set=ns.trace_set,
            # <<< ch22
            # >>> ch24
            speculative_algorithm=ns.speculative_algorithm,
            speculative_draft_model_path=ns.speculative_draft_model_path,
            speculative_num_draft_tokens=ns.speculative_num_draft_tokens,
            # <<< ch24
            # >>> ch25
            grammar_backend=ns.grammar_backend,
            # <<< ch25
            # >>> ch26
            quantization=ns.quantization,
            # <<< ch26
            tp_size=ns.tp, nnodes=ns.nnodes, node_rank=ns.node_rank,
            dist_init_addr=ns.dist_init_addr,
            # >>> ch27
            dp_size=ns.dp_size, load_balance_method=ns.load_balance_method,
            # <<< ch27
        )
    except ValueError as e:
        raise FlagError(str(e)) from None
    # >>> ch27
    if ns.shell and args.dp_size > 1:
        raise FlagError("--shell talks to one replica; --dp-size > 1 is for serving")
    # <<< ch27
    return args, ns.shell
