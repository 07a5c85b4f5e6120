"""Stop strings: end the answer where one appears, without ever streaming a part of it.

Text arrives in pieces, and a stop string can straddle two of them ("###" as "#" then "##"). So
the checker holds back the longest tail of the text that could still grow into a stop string, and
releases it once it cannot (or when the stream ends).

Each piece costs time in proportion to the number of stop strings times (the piece + the longest
stop string), never to the whole answer: only the held tail, which is shorter than the longest
stop string, is looked at again. protocol.py bounds how many stop strings a request may have and
how long each may be, so this runs on the API server's event loop without stalling it.
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
        if not text:
            return 0
        best, last = 0, text[-1]
        for stop in self.stops:
            # A prefix of length n can only match if it ends with the text's last character:
            # try those lengths alone, longest first (str.rfind finds them at C speed).
            n = stop.rfind(last, 0, min(len(stop) - 1, len(text))) + 1
            while n > best:
                if text.endswith(stop[:n]):
                    best = n
                    break
                n = stop.rfind(last, 0, n - 1) + 1
        return best
