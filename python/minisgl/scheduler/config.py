"""Scheduler settings on top of the engine's."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine.config import EngineConfig
from minisgl.kvcache import PREFIX_CACHE_KINDS


@dataclass
class SchedulerConfig(EngineConfig):
    # >>> before ch10
    # cache_type: str = "naive"  # the radix cache that shares prefixes arrives in chapter 10
    # <<< before ch10
    # >>> ch10
    cache_type: str = "radix"  # "radix" shares prefixes between requests, "naive" never does
    # <<< ch10
    max_prefill_length: int = 8192  # token budget of one prefill batch (chunked prefill)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cache_type not in PREFIX_CACHE_KINDS:
            raise ValueError(f"cache_type must be one of {PREFIX_CACHE_KINDS}, "
                             f"got {self.cache_type!r}")
        if self.max_prefill_length < 1:
            raise ValueError(f"max_prefill_length must be >= 1, got {self.max_prefill_length}")
