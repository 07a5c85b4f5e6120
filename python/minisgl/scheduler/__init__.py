"""Deciding what runs: admitting requests, batching them, managing their KV memory."""

from .config import SchedulerConfig
from .scheduler import Scheduler

__all__ = ["Scheduler", "SchedulerConfig"]
