"""minisgl: a compact LLM inference engine, rebuilt one chapter at a time."""

__version__ = "0.1.0"
