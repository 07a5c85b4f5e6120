"""Small helpers shared by every part of the engine."""

from .logger import init_logger
from .misc import MinisglError, cdiv, div_exact

__all__ = ["MinisglError", "cdiv", "div_exact", "init_logger"]
