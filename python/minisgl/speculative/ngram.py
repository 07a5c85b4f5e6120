"""Proposals without a second model: the request's own tokens (chapter 24, NGRAM).

Text repeats itself: code names the same variables again, a list continues its pattern, an answer
quotes its question. So the tokens that followed the last time the request's most recent n-gram
appeared are a good guess for what follows now ("prompt lookup"). The guess costs a search over
the request's tokens on the host and nothing on the device; when it is wrong, verification throws
it away and the step still yields one token, as plain decoding would.
"""

from __future__ import annotations

# Longest and shortest n-gram looked up: a longer match predicts better, a shorter one matches
# more often. Tried from longest to shortest, the first one found wins.
MAX_NGRAM = 4
MIN_NGRAM = 2
# Only the most recent tokens are searched, so a step's host cost stays bounded on long requests.
SEARCH_WINDOW = 2048


def propose_ngram(tokens: list[int], k: int, max_ngram: int = MAX_NGRAM,
                  min_ngram: int = MIN_NGRAM, window: int = SEARCH_WINDOW) -> list[int]:
    """Up to k tokens that followed the latest earlier occurrence of the last n tokens (n from
    max_ngram down to min_ngram); [] when none occurs or k is 0."""
    if k <= 0:
        return []
    start = max(0, len(tokens) - window)
    for n in range(min(max_ngram, len(tokens) - 1), min_ngram - 1, -1):
        pattern = tokens[-n:]
        first = pattern[0]
        # latest match first; a match must end before the pattern itself starts to overlap it
        # from the right (the last position that can start one is len - n - 1)
        for at in range(len(tokens) - n - 1, start - 1, -1):
            if tokens[at] == first and tokens[at : at + n] == pattern:
                follow = tokens[at + n : at + n + k]
                if follow:
                    return follow
    return []
