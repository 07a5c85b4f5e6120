"""Cases of exercise 2501. Expected values come from the model below, which lists each token's
allowed-ness with a recursive walk and builds every word from a string of bits."""

import random

from judgekit.case import Case

DIGITS = {str(d) for d in range(10)}


def _walk(transitions, at, text):
    if not text:
        return True
    nxt = transitions[at].get(text[0])
    return nxt is not None and _walk(transitions, nxt, text[1:])


def model(vocab, transitions, accepting, state, eos_id):
    if not 0 <= state < len(transitions) or not 0 <= eos_id < len(vocab):
        return "ValueError"
    bits = [(state in accepting) if i == eos_id else (bool(t) and _walk(transitions, state, t))
            for i, t in enumerate(vocab)]
    bits += [False] * (-len(bits) % 32)
    words = []
    for w in range(len(bits) // 32):
        value = int("".join("1" if b else "0" for b in reversed(bits[32 * w : 32 * w + 32])), 2)
        words.append(value - 2**32 if value >= 2**31 else value)
    return words


def _case(name, vocab, transitions, accepting, state, eos_id, visible=False) -> Case:
    args = {"vocab": vocab, "transitions": transitions, "accepting": accepting, "state": state,
            "eos_id": eos_id}
    expected = model(vocab, transitions, accepting, state, eos_id)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def _random_dfa(rng, states, alphabet):
    return [{c: rng.randrange(states) for c in alphabet if rng.random() < 0.6}
            for _ in range(states)]


def cases() -> list:
    rng = random.Random()
    number = [{d: 1 for d in DIGITS}, {d: 1 for d in DIGITS}]
    vocab = ["1", "23", "a", "4b", "", "<eos>"]
    # "yes" or "no": states 0 -y-> 1 -e-> 2 -s-> 3; 0 -n-> 4 -o-> 3
    yes_no = [{"y": 1, "n": 4}, {"e": 2}, {"s": 3}, {}, {"o": 3}]
    words = ["y", "ye", "yes", "no", "n", "es", "s", "o", "yes!", "<eos>"]
    out = [
        _case("示例：开头", vocab, number, [1], 0, 5, visible=True),
        _case("示例：已有数字", vocab, number, [1], 1, 5, visible=True),
        _case("yes/no：开头", words, yes_no, [3], 0, 9),
        _case("yes/no：读过 y", words, yes_no, [3], 1, 9),
        _case("yes/no：结束了只剩结束符", words, yes_no, [3], 3, 9),
        _case("32 个 token 正好一个整数，第 31 位是负数", [str(i % 10) for i in range(31)]
              + ["<eos>"], number, [1], 1, 31),
        _case("33 个 token：两个整数", ["7"] * 32 + ["<eos>"], number, [1], 0, 32),
        _case("全部允许：-1", ["5"] * 31 + ["<eos>"], number, [1], 1, 31),
        _case("没有转移的状态：只看结束符", ["a", "b", "<eos>"], [{}], [0], 0, 2),
        _case("state 不存在", vocab, number, [1], 7, 5),
        _case("state 为负", vocab, number, [1], -1, 5),
        _case("eos_id 越界", vocab, number, [1], 0, 6),
        _case("eos_id 为负", vocab, number, [1], 0, -1),
    ]
    for n in range(8):
        alphabet = "abcd"[: rng.randint(1, 4)]
        states = rng.randint(1, 5)
        dfa = _random_dfa(rng, states, alphabet)
        size = rng.randint(1, 100)
        toks = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 4)))
                for _ in range(size)]
        eos = rng.randrange(size)
        accepting = [s for s in range(states) if rng.random() < 0.5]
        out.append(_case(f"随机 {n + 1}", toks, dfa, accepting, rng.randrange(states), eos))
    return out
