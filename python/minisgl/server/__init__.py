"""The serving front: flags, process launcher, OpenAI-compatible HTTP API (chapter 14)."""
