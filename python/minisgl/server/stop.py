"""Stop strings: end the answer where one appears, without ever streaming a part of it.

Text arrives in pieces, and a stop string can straddle two of them ("###" as "#" then "##"). So
the checker holds back the longest tail of the text that could still grow into a stop string, and
releases it once it cannot (or when the stream ends).
"""

from __future__ import annotations


class StopChecker:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """The text that is now safe to emit. After a stop string, `stopped` is True and the
        text up to (not including) the stop string is the last thing returned. Of several stop
        strings, the one whose end comes first counts (the longest, if they end together)."""
        if self.stopped:
            return ""
        text = self._held + piece
        # The stop string that is complete first wins (what a token-by-token check would see),
        # so the answer does not depend on how the text was cut into pieces.
        hits = [(i + len(s), i) for s in self.stops if (i := text.find(s)) >= 0]
        if hits:
            self.stopped, self._held = True, ""
            return text[: min(hits)[1]]
        keep = self._partial_tail(text)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The held-back tail, at the end of the stream (it never became a stop string)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held

    def _partial_tail(self, text: str) -> int:
        """Length of the longest suffix of text that is a proper prefix of some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
