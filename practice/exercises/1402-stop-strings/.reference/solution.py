"""Reference solution of exercise 1402."""


class StopChecker:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.stopped = False
        self._held = ""

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        text = self._held + piece
        # The stop string that is complete first wins: the smallest end, then the earliest start
        # (the longest of those ending there). text.find gives each stop's first, so earliest, end.
        hits = [(i + len(s), i) for s in self.stops if (i := text.find(s)) >= 0]
        if hits:
            self.stopped, self._held = True, ""
            return text[: min(hits)[1]]
        keep = self._partial_tail(text)
        self._held = text[len(text) - keep :]
        return text[: len(text) - keep]

    def flush(self) -> str:
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


def run(stops: list[str], pieces: list[str]) -> dict:
    checker = StopChecker(list(stops))
    steps = []
    for piece in pieces:
        out = checker.feed(piece)
        steps.append([out, checker.stopped])
    tail = checker.flush()
    text = "".join(out for out, _ in steps) + tail
    return {"text": text, "stopped": checker.stopped, "steps": steps, "flush": tail}
