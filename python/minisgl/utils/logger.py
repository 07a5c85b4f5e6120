"""One logging format for every process of the engine."""

from __future__ import annotations

import logging
import sys

from minisgl.env import load_env

_FORMAT = "[%(asctime)s %(name)s %(levelname)s] %(message)s"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time of writing (so pytest's capture sees it)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def init_logger(name: str) -> logging.Logger:
    """A logger that writes to stderr once, however many modules ask for it."""
    logger = logging.getLogger(name)
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter(_FORMAT, datefmt="%H:%M:%S"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(load_env().log_level)
    return logger
