"""Typed settings read from environment variables.

Every knob that is not a command-line flag lives here, so a learner finds them in one place and
tests can override them with `monkeypatch.setenv`. Values are read when `load_env()` is called,
not at import time, so a test that changes a variable sees the new value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


# >>> ch20
def _choice(name: str, choices: tuple[str, ...]) -> str:
    """The variable's value, one of choices (the first when unset)."""
    value = os.environ.get(name) or choices[0]
    if value not in choices:
        raise ValueError(f"{name}={value!r} must be one of {', '.join(choices)}")
    return value
# <<< ch20


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "minisgl"


@dataclass(frozen=True)
class EnvSettings:
    cache_dir: Path  # MINISGL_CACHE_DIR: converted offline models, built extensions, toolkits
    log_level: str  # MINISGL_LOG_LEVEL: DEBUG, INFO, WARNING, ERROR
    offline: bool  # MINISGL_OFFLINE or HF_HUB_OFFLINE: never try the Hugging Face hub
    disable_cuda_ext: bool  # MINISGL_DISABLE_CUDA_EXT: always use the torch kernels
    # >>> ch16
    # MINISGL_DISABLE_OVERLAP_SCHEDULING (the official name): read each step's tokens before
    # launching the next one (chapter 16)
    disable_overlap_scheduling: bool
    # MINISGL_DUMMY_WEIGHT: LLM() uses random weights when not told otherwise (to run scripts
    # that name a model whose weights are not here, such as the official bench.py)
    dummy_weight: bool
    # <<< ch16
    # >>> ch14
    shell_max_tokens: int  # MINISGL_SHELL_MAX_TOKENS: longest answer in `--shell`
    shell_temperature: float  # MINISGL_SHELL_TEMPERATURE: 0 is greedy (the same answer each time)
    # <<< ch14
    # >>> ch20
    # MINISGL_DISABLE_FUSED_KERNELS: on a GPU too, RMSNorm, RoPE and SiLU run as torch ops
    disable_fused_kernels: bool
    # MINISGL_DISABLE_ONEDNN: on a CPU, linear layers keep torch's F.linear (weights unpacked)
    disable_onednn: bool
    # MINISGL_CPU_DTYPE: what --dtype auto means on a CPU: auto (bfloat16 where the CPU computes
    # in bf16 natively, else float32), float32 or bfloat16 (the tests ask for float32)
    cpu_dtype: str
    # MINISGL_DISABLE_PDL: launch the one-token Triton kernels without programmatic dependent
    # launch (kernel/triton/pdl.py), to measure what it buys or to rule it out of a bug
    disable_pdl: bool
    # <<< ch20


def load_env() -> EnvSettings:
    level = os.environ.get("MINISGL_LOG_LEVEL", "INFO").upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError(f"MINISGL_LOG_LEVEL={level!r} must be DEBUG, INFO, WARNING or ERROR")
    cache = os.environ.get("MINISGL_CACHE_DIR")
    return EnvSettings(
        cache_dir=Path(cache).expanduser() if cache else _default_cache_dir(),
        log_level=level,
        offline=_flag("MINISGL_OFFLINE", False) or _flag("HF_HUB_OFFLINE", False),
        disable_cuda_ext=_flag("MINISGL_DISABLE_CUDA_EXT", False),
        # >>> ch16
        disable_overlap_scheduling=_flag("MINISGL_DISABLE_OVERLAP_SCHEDULING", False),
        dummy_weight=_flag("MINISGL_DUMMY_WEIGHT", False),
        # <<< ch16
        # >>> ch14
        shell_max_tokens=int(os.environ.get("MINISGL_SHELL_MAX_TOKENS", "512")),
        shell_temperature=float(os.environ.get("MINISGL_SHELL_TEMPERATURE", "0")),
        # <<< ch14
        # >>> ch20
        disable_fused_kernels=_flag("MINISGL_DISABLE_FUSED_KERNELS", False),
        disable_onednn=_flag("MINISGL_DISABLE_ONEDNN", False),
        cpu_dtype=_choice("MINISGL_CPU_DTYPE", ("auto", "float32", "bfloat16")),
        disable_pdl=_flag("MINISGL_DISABLE_PDL", False),
        # <<< ch20
    )
