"""Reference solution of exercise 2401."""


def _propose(seq, m, max_ngram, min_ngram):
    for n in range(min(max_ngram, len(seq) - 1), min_ngram - 1, -1):
        suffix = seq[-n:]
        for i in range(len(seq) - n - 1, -1, -1):
            if seq[i : i + n] == suffix and seq[i + n : i + n + m]:
                return seq[i + n : i + n + m]
    return []


def ngram_speculate(prompt, target, k, max_ngram, min_ngram):
    if not prompt or not target or k < 1 or min_ngram < 1 or max_ngram < min_ngram:
        raise ValueError("prompt and target must be non-empty, k >= 1, 1 <= min <= max ngram")
    out = [target[0]]
    steps = guessed = accepted = 0
    while len(out) < len(target):
        m = min(k, len(target) - len(out) - 1)
        guess = _propose(prompt + out, m, max_ngram, min_ngram) if m > 0 else []
        kept = 0
        while kept < len(guess) and guess[kept] == target[len(out) + kept]:
            kept += 1
        out += guess[:kept] + [target[len(out) + kept]]
        steps, guessed, accepted = steps + 1, guessed + len(guess), accepted + kept
    return {"tokens": out, "steps": steps, "guessed": guessed, "accepted": accepted}
