"""Token ids to text while a request is still generating.

Decoding each new token on its own does not work: a byte-level token can hold part of a UTF-8
character (an emoji is often 2-4 tokens), and SentencePiece-style tokenizers drop or add a space
depending on what precedes a token. So the detokenizer keeps two offsets into the ids it was fed:

    ids:  ... | prefix_offset ... read_offset | ... newest
                 already emitted (context)      not emitted yet

It decodes the window `ids[prefix_offset:]` and the context `ids[prefix_offset:read_offset]`; the
new text is what the window adds after the context. When the window text ends in U+FFFD the last
character is (most likely) not complete yet, so nothing is emitted and the tokens wait for the
next call. The pieces, concatenated, equal decoding all ids at once.

At the end of a stream `finish()` flushes what is held back. If the stream really stops in the
middle of a character (a length limit cut it), that last piece ends in U+FFFD, exactly as the
one-shot decode does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

REPLACEMENT_CHAR = "\ufffd"

Decode = Callable[..., str]  # decode(ids, skip_special_tokens=...) -> str


class IncrementalDetokenizer:
    """Streaming decoder for one request: feed ids, get the text they add."""

    def __init__(self, decode: Decode, *, skip_special_tokens: bool = True) -> None:
        self._decode = decode
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self.prefix_offset = 0  # start of the context window
        self.read_offset = 0  # ids before this are emitted

    def feed(self, token_ids: int | Iterable[int]) -> str:
        """Add one id or several; return the text that became final (often "")."""
        self.ids += [token_ids] if isinstance(token_ids, int) else list(token_ids)
        context, window = self._texts()
        if len(window) <= len(context) or window.endswith(REPLACEMENT_CHAR):
            return ""
        return self._emit(window[len(context) :])

    def finish(self) -> str:
        """Flush the held-back tail at the end of the stream (may end in U+FFFD, see above)."""
        context, window = self._texts()
        return self._emit(window[len(context) :])

    def _texts(self) -> tuple[str, str]:
        context = self._text(self.ids[self.prefix_offset : self.read_offset])
        return context, self._text(self.ids[self.prefix_offset :])

    def _text(self, ids: Sequence[int]) -> str:
        return self._decode(ids, skip_special_tokens=self.skip_special_tokens) if ids else ""

    def _emit(self, piece: str) -> str:
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return piece
