"""Scheduler settings on top of the engine's."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine.config import EngineConfig


@dataclass
class SchedulerConfig(EngineConfig):
    cache_type: str = "radix"  # "radix" shares prefixes between requests, "naive" never does
    max_prefill_length: int = 8192  # token budget of one prefill batch (chunked prefill)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cache_type not in ("radix", "naive"):
            raise ValueError(f"cache_type must be 'radix' or 'naive', got {self.cache_type!r}")
        if self.max_prefill_length < 1:
            raise ValueError(f"max_prefill_length must be >= 1, got {self.max_prefill_length}")
