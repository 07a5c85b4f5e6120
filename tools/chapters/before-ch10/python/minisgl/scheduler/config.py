"""Scheduler settings on top of the engine's."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine.config import EngineConfig
from minisgl.kvcache import PREFIX_CACHE_KINDS

GPU_PREFILL_LENGTH = 8192
CPU_PREFILL_LENGTH = 512


@dataclass
class SchedulerConfig(EngineConfig):
    cache_type: str = "naive"  # the radix cache that shares prefixes arrives in chapter 10
    # Token budget of one prefill batch (chunked prefill); None: 8192 on a GPU (as the official
    # engine), 512 on a CPU, where one 512-token chunk late in an 8k prompt already takes
    # seconds and every running request waits for it (docs/chapters/ch09.md has the figures).
    max_prefill_length: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_prefill_length is None:
            self.max_prefill_length = GPU_PREFILL_LENGTH if self.device.startswith("cuda") \
                else CPU_PREFILL_LENGTH
        if self.cache_type not in PREFIX_CACHE_KINDS:
            raise ValueError(f"cache_type must be one of {PREFIX_CACHE_KINDS}, "
                             f"got {self.cache_type!r}")
        if self.max_prefill_length < 1:
            raise ValueError(f"max_prefill_length must be >= 1, got {self.max_prefill_length}")
