"""One logging format for every process of the engine."""

from __future__ import annotations

import logging
import os
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
# >>> ch14


def set_log_level(level: str) -> None:
    """Change the level of every logger of this process, and of the processes it starts later
    (they read MINISGL_LOG_LEVEL): `--log-level`."""
    os.environ["MINISGL_LOG_LEVEL"] = level
    for name, logger in logging.Logger.manager.loggerDict.items():
        if name.startswith("minisgl") and isinstance(logger, logging.Logger):
            logger.setLevel(level)
# <<< ch14
