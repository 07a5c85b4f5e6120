"""Text a program produced, made safe to show in a terminal or on a page.

A learner's program controls what it prints, the messages of its exceptions and (in a syntax
error) the source lines the judge quotes. Printed raw, an ESC sequence can move the cursor, clear
lines, set the window title (OSC) and paint a fake "结果：20/20 通过" over the judge's real result
lines; a lone carriage return overwrites a line; a bidi override (U+202E) reverses what follows
it, on the page as well. So every control character except the line feed and the tab is shown as
an escape (ESC as \\x1b, CR as \\r, U+202E as \\u202e): C0 and C1 controls, DEL, the Unicode
format characters (bidi embeddings, overrides and isolates, zero-width characters, the BOM),
line and paragraph separators and lone surrogates. A CR that ends a line (CRLF) becomes a plain
line end. Escaping is idempotent: escaped text has no control character left to escape.
"""

from __future__ import annotations

import re
import unicodedata

_UNSAFE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
_CANDIDATE = re.compile(r"[^\n\t\x20-\x7e]")  # everything else is printable ASCII


def _escape(match: re.Match) -> str:
    ch = match.group()
    if unicodedata.category(ch) not in _UNSAFE_CATEGORIES:
        return ch  # CJK, accented letters, emoji: shown as they are
    if ch == "\r":
        return "\\r"
    code = ord(ch)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def safe_text(text: object) -> str:
    """`text` (any object, as str()) with every control character escaped."""
    text = text if isinstance(text, str) else str(text)
    return _CANDIDATE.sub(_escape, text.replace("\r\n", "\n"))


def safe_json(value):
    """A JSON-able value with every string in it (keys too) passed through safe_text."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_json(k) if isinstance(k, str) else k: safe_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [safe_json(v) for v in value]
    return value
