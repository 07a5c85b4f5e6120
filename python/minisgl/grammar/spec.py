"""Which grammar a request asks for, and whether it is well formed (chapter 25).

A request names at most one of SGLang's three fields: `json_schema` (a JSON Schema, as a string),
`regex`, or `ebnf` (XGrammar's EBNF dialect, `root ::= ...`). OpenAI's `response_format` maps onto
them in the API server: `json_object` is the schema {"type": "object"}. The pair (kind, text) is
the grammar's key: the compiler caches by it, so every request with the same schema text shares
one compiled grammar.

`check` parses a grammar without a tokenizer: it costs about a millisecond, so the API server runs
it on every request and answers a bad schema or regex with a 400 before anything is queued. The
compile against the vocabulary (compiler.py) happens later, in the scheduler's process.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from minisgl.core import SamplingParams

GRAMMAR_KINDS = ("json_schema", "regex", "ebnf")
JSON_OBJECT_SCHEMA = '{"type": "object"}'  # OpenAI's response_format {"type": "json_object"}
# A schema's compile time grows fast with its nesting: 400 nested objects took 18 s on the 2-core
# VM, holding the compile thread (and every constrained request behind it). 64 JSON levels are
# 31 nested objects ({"properties": {"x": {...}}} is two levels per object).
MAX_SCHEMA_DEPTH = 64
# XGrammar's C++ errors start with "[hh:mm:ss] /path/file.cc:123: ": the reader needs the rest
_CPP_PREFIX = re.compile(r"^\[[0-9:]+\]\s+\S+:\d+:\s*")


class GrammarError(ValueError):
    """A grammar that cannot be parsed; the message says where and why."""


@dataclass(frozen=True)
class GrammarKey:
    kind: str  # one of GRAMMAR_KINDS
    text: str


def grammar_of(params: SamplingParams) -> GrammarKey | None:
    """The grammar a request's parameters name, or None for free text."""
    for kind in GRAMMAR_KINDS:
        text = getattr(params, kind)
        if text is not None:
            return GrammarKey(kind, text)
    return None


def schema_key(schema: dict[str, Any] | bool) -> GrammarKey:
    """The key of a schema given as a parsed JSON value (OpenAI's response_format)."""
    return GrammarKey("json_schema", json.dumps(schema, ensure_ascii=False))


def check_grammar(key: GrammarKey) -> None:
    """Raise GrammarError if the grammar cannot be parsed (no tokenizer needed)."""
    import xgrammar as xgr

    if key.kind == "json_schema":
        try:
            schema = json.loads(key.text)
        except json.JSONDecodeError as e:
            raise GrammarError(f"the JSON schema is not valid JSON: {e}") from None
        except RecursionError:
            raise GrammarError("the JSON schema is nested too deeply to read") from None
        if not isinstance(schema, (dict, bool)):
            raise GrammarError(f"a JSON schema is an object (or true/false), got "
                               f"{type(schema).__name__}")
        if (depth := nesting(schema)) > MAX_SCHEMA_DEPTH:
            raise GrammarError(f"the JSON schema is nested {depth} levels deep; at most "
                               f"{MAX_SCHEMA_DEPTH} are allowed")
    build = {"json_schema": xgr.Grammar.from_json_schema, "regex": xgr.Grammar.from_regex,
             "ebnf": xgr.Grammar.from_ebnf}[key.kind]
    try:
        build(key.text)
    except (RuntimeError, ValueError, TypeError) as e:
        raise GrammarError(f"invalid {key.kind}: {readable(e)}") from None


def nesting(value: Any) -> int:
    """How many objects and arrays deep a parsed JSON value goes (a scalar is 0)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) \
            else None
        if children is not None:
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in children)
    return deepest


def readable(error: Exception) -> str:
    """XGrammar's message without its C++ source location, on one line."""
    lines = [_CPP_PREFIX.sub("", line).strip() for line in str(error).splitlines()]
    return " ".join(line for line in lines if line)[:500]
