"""Tokenizers: text to ids for prompts and chats, and streaming ids back to text."""

from .detokenize import IncrementalDetokenizer
from .tokenize import Tokenizer, load_tokenizer

__all__ = ["IncrementalDetokenizer", "Tokenizer", "load_tokenizer"]
