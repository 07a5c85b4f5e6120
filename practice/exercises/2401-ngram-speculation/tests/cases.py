"""Cases of exercise 2401. Expected values come from the model below, which lists every earlier
occurrence of every suffix with a comprehension and picks by (length, position), and walks the
output one position at a time."""

import random

from judgekit.case import Case


def _guess(seq, m, max_n, min_n):
    found = [(n, i) for n in range(min_n, min(max_n, len(seq) - 1) + 1)
             for i in range(len(seq) - n) if seq[i : i + n] == seq[len(seq) - n :]
             and i + n < len(seq)]
    for n, i in sorted(found, reverse=True):  # longest n first, then latest position
        if seq[i + n : i + n + m]:
            return seq[i + n : i + n + m]
    return []


def model(prompt, target, k, max_ngram, min_ngram):
    if not prompt or not target or k < 1 or min_ngram < 1 or max_ngram < min_ngram:
        return "ValueError"
    made, steps, guessed, accepted = 1, 0, 0, 0
    while made < len(target):
        m = min(k, len(target) - made - 1)
        guess = _guess(list(prompt) + list(target[:made]), m, max_ngram, min_ngram) if m else []
        good = 0
        for pos, token in enumerate(guess):
            if token != target[made + pos]:
                break
            good += 1
        steps, guessed, accepted, made = steps + 1, guessed + len(guess), accepted + good, \
            made + good + 1
    return {"tokens": list(target), "steps": steps, "guessed": guessed, "accepted": accepted}


def _case(name, prompt, target, k, max_ngram, min_ngram, visible=False) -> Case:
    args = {"prompt": prompt, "target": target, "k": k, "max_ngram": max_ngram,
            "min_ngram": min_ngram}
    expected = model(prompt, target, k, max_ngram, min_ngram)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def cases() -> list:
    rng = random.Random()
    code = [5, 6, 7, 8, 9, 5, 6, 7, 8, 10]
    out = [
        _case("示例", [1, 2, 3, 1, 2, 3, 1], [2, 3, 1, 2, 9], 3, 2, 1, visible=True),
        _case("没有重复：每步一个 token", [10, 11, 12, 13], [14, 15, 16, 17], 4, 3, 1),
        _case("只要一个 token：没有验收步", [1, 2, 1], [2], 4, 2, 1),
        _case("猜错的第一个就停", [1, 2, 3, 1, 2], [3, 7, 1, 2, 3], 4, 2, 2),
        _case("剩余限制猜测个数", [4, 4, 4, 4, 4], [4, 4, 4], 8, 3, 1),
        _case("长 n-gram 优先于更近的短 n-gram", code + [5, 6, 7], [8, 9, 5, 6, 7, 8], 3, 3, 1),
        _case("k = 1", [1, 2, 1, 2, 1], [2, 1, 2, 1, 2, 1], 1, 2, 1),
        _case("prompt 为空", [], [1], 2, 2, 1),
        _case("target 为空", [1, 2], [], 2, 2, 1),
        _case("k = 0", [1, 2], [3], 0, 2, 1),
        _case("min_ngram = 0", [1, 2], [3], 2, 2, 0),
        _case("max_ngram < min_ngram", [1, 2], [3], 2, 1, 2),
    ]
    for n in range(8):
        symbols = rng.randint(2, 6)  # few symbols: n-grams repeat
        prompt = [rng.randrange(symbols) for _ in range(rng.randint(1, 40))]
        target = [rng.randrange(symbols) for _ in range(rng.randint(1, 60))]
        if n % 2:  # a target that continues the prompt's pattern: long acceptances
            period = rng.randint(1, 5)
            target = [prompt[(len(prompt) + i) % len(prompt) % period] for i in range(40)]
        hi = rng.randint(1, 5)
        out.append(_case(f"随机 {n + 1}", prompt, target, rng.randint(1, 8), hi,
                         rng.randint(1, hi)))
    return out
