"""Structured output (chapter 25): grammars that a request's answer must match, compiled with
XGrammar and enforced by masking the logits before each sampled token."""

from .constraints import GrammarManager
from .spec import GrammarError, GrammarKey, check_grammar, grammar_of

__all__ = ["GrammarError", "GrammarKey", "GrammarManager", "check_grammar", "grammar_of"]
