"""The offline, in-process API."""

from .llm import LLM

__all__ = ["LLM"]
