"""Cases of exercise 1402. Expected values come from the model below, which never keeps a buffer.
Where the answer ends is found by reading the whole text one character at a time: at the first
end position where some stop string is a suffix of what was read, cut before the longest such stop
string. After each piece the model applies that to the text received so far, and otherwise emits
everything but the longest suffix that is a proper prefix of a stop string (found by trying every
suffix against every prefix). Each case also checks that the answer does not depend on the pieces:
it equals the cut of the whole text, and the model gives the same answer for other cuttings."""

import random

from judgekit.case import Case


def cut_point(stops: list[str], text: str) -> int | None:
    """Where the answer ends: read text one character at a time; at the first end where some stop
    string is a suffix of text[:end], cut at end - len(the longest such stop). None: no stop."""
    stops = [s for s in stops if s]
    for end in range(1, len(text) + 1):
        done = [len(s) for s in stops if text[:end].endswith(s)]
        if done:
            return end - max(done)
    return None


def model(stops: list[str], pieces: list[str]) -> dict:
    stops = [s for s in stops if s]
    prefixes = {s[:n] for s in stops for n in range(1, len(s))}  # proper, non-empty prefixes
    seen, emitted, stopped, steps = "", 0, False, []
    for piece in pieces:
        if stopped:
            steps.append(["", True])
            continue
        seen += piece
        cut = cut_point(stops, seen)
        if cut is not None:
            end, stopped = cut, True
        else:
            hold = max((n for n in range(1, len(seen) + 1) if seen[-n:] in prefixes), default=0)
            end = len(seen) - hold
        assert end >= emitted, "the model emitted text it should have held"
        steps.append([seen[emitted:end], stopped])
        emitted = end
    tail = "" if stopped else seen[emitted:]
    text = "".join(out for out, _ in steps) + tail
    return {"text": text, "stopped": stopped, "steps": steps, "flush": tail}


def _check_piece_independent(stops: list[str], pieces: list[str], want: dict) -> None:
    whole = "".join(pieces)
    cut = cut_point(stops, whole)
    assert want["text"] == (whole if cut is None else whole[:cut]), (stops, pieces)
    assert want["stopped"] == (cut is not None), (stops, pieces)
    rng = random.Random(len(whole))
    cuttings = [[whole], list(whole), _split(rng, whole, 3), _split(rng, whole, 7)]
    for other in cuttings:
        got = model(stops, other)
        assert (got["text"], got["stopped"]) == (want["text"], want["stopped"]), (stops, other)


def _case(name, stops, pieces, visible=False) -> Case:
    stops, pieces = list(stops), list(pieces)
    want = model(stops, pieces)
    _check_piece_independent(stops, pieces, want)
    return Case(name, {"stops": stops, "pieces": pieces}, want, visible=visible)


def _split(rng, text: str, max_piece: int, empty_share: float = 0.1) -> list[str]:
    pieces, pos = [], 0
    while pos < len(text):
        if rng.random() < empty_share:
            pieces.append("")
        step = rng.randint(1, max_piece)
        pieces.append(text[pos : pos + step])
        pos += step
    return pieces


def _text_without_stops(rng, alphabet: str, weights, n: int, stops: list[str], filler: str) -> str:
    """Random text in which no stop string occurs: a character that would complete one is
    replaced by `filler` (a character that no stop string contains)."""
    text = ""
    for c in rng.choices(alphabet, weights, k=n):
        text += c if not any((text + c).endswith(s) for s in stops) else filler
    return text


def _random_case(rng, name, stop_alphabet, stop_lens, num_stops, alphabet, weights, length,
                 max_piece, plants) -> Case:
    stops = ["".join(rng.choice(stop_alphabet) for _ in range(rng.randint(*stop_lens)))
             for _ in range(num_stops)]
    filler = next(c for c in alphabet if c not in stop_alphabet)
    text = _text_without_stops(rng, alphabet, weights, length, stops, filler)
    ending = rng.choice(stops)[:-1]  # end on a part of a stop string: flush() must give it back
    if not any(stop in text + ending for stop in stops):
        text += ending
    for _ in range(plants):  # a stop string somewhere in the second half
        at = rng.randint(len(text) // 2, len(text))
        text = text[:at] + rng.choice(stops) + text[at:]
    return _case(name, stops, _split(rng, text, max_piece))


def _nested_case(rng, name, max_piece, same_end) -> Case:
    """A stop string planted whole, in one piece, with a shorter stop string inside it that is
    complete first (or at the same end): the earliest start is the wrong answer here."""
    outer = "".join(rng.choice("abc") for _ in range(rng.randint(5, 8)))
    i = rng.randint(1, len(outer) - 3)
    end = len(outer) if same_end else rng.randint(i + 2, len(outer) - 1)
    inner = outer[i:end]
    stops = [outer, inner, "".join(rng.choice("abc") for _ in range(3))]
    rng.shuffle(stops)
    text = _text_without_stops(rng, "abcx", [3, 3, 3, 1], rng.randint(20, 80), stops, "x")
    at = rng.randint(0, len(text))
    text = text[:at] + outer + text[at:]
    pieces = _split(rng, text, max_piece)
    cuts, pos = [], 0
    for piece in pieces:  # the planted stop string arrives within one piece
        pos += len(piece)
        if not at < pos < at + len(outer):
            cuts.append(pos)
    pieces = [text[a:b] for a, b in zip([0] + cuts, cuts)]
    return _case(name, stops, pieces)


def cases() -> list:
    rng = random.Random(1402)
    out = [
        _case("示例 1：停止串跨过三段", ["###"], ["Hello #", "#", "# world", "!"], visible=True),
        _case("示例 2：留着的尾巴后来不是停止串了", ["</s>"], ["x<", "/t", "y"], visible=True),
        _case("示例 3a：重叠的停止串，分两段", ["abc", "b"], ["ab", "c"], visible=True),
        _case("示例 3b：重叠的停止串，一段", ["abc", "b"], ["abc"], visible=True),
        _case("示例 3c：同时完整，取最长的", ["bc", "abc"], ["xab", "cy"], visible=True),
        _case("没有停止串", [], ["Hello", ", ", "world", "#"]),
        _case("停止串列表里的空串不算", ["", "END"], ["a", "E", "N", "x"]),
        _case("没有停止串出现，留着的尾巴在 flush 时给出", ["stop!"], ["non", "-st", "o", "p"]),
        _case("一开头就是停止串", ["\n\n"], ["\n", "\nHello"]),
        _case("停止串在最后一段的末尾", ["<|im_end|>"], ["Hi", "<|im", "_e", "nd|>"]),
        _case("停止串比每一段都长", ["abcdefgh"], list("xabcdeabcdefgh") + ["y"]),
        _case("一个停止串是另一个的前缀", ["ab", "abc"], ["xa", "bc"]),
        _case("尾巴同时是几个停止串的前缀，取最长的", ["aab", "aaab", "ac"],
              ["xa", "a", "a", "a", "c", "a", "a", "b"]),
        _case("尾巴变短而不是清空", ["aaab"], ["aaa", "a", "a", "c"]),
        _case("同一段里出现几个停止串，取最先完整的", ["yy", "xx"], ["ab", "cxxyy"]),
        _case("先开始的停止串不一定先完整", ["abcd", "c"], ["xabcd"]),
        _case("先开始的停止串不一定先完整（分段）", ["abcd", "c"], ["xa", "bc", "d"]),
        _case("长的停止串包着短的，一段到齐", ["<|im_end|>", "end"], ["答案<|im_end|>"]),
        _case("结束位置相同的三个停止串", ["c", "bc", "abc"], ["xabcabc"]),
        _case("结束位置相同，最长的不在列表最前", ["c", "bc", "abc"], ["xa", "b", "c"]),
        _case("同一处结束的几个候选，取开头最靠前的", ["aaab", "ab", "b"], ["xaaab"]),
        _case("先完整的短停止串在后一段里", ["bcde", "cd"], ["ab", "cdef"]),
        _case("停止以后的段都返回空串", ["。"], ["你好", "。再", "见", "。"]),
        _case("空段", ["##"], ["", "a", "", "#", "", "#b", ""]),
        _case("中文和表情", ["\n用户：", "😀😀"], ["答：", "好的😀", "。\n", "用", "户", "：好"]),
        _case("没有任何段", ["x"], []),
    ]
    specs = [
        # name, stop alphabet, stop lengths, stops, text alphabet, weights, length, max piece
        ("随机：字母表 ab 的停止串", "ab", (2, 5), 3, "abx", [3, 3, 2], 100, 4),
        ("随机：很多停止串", "ab", (3, 6), 8, "abx", [3, 3, 1], 120, 6),
        ("随机：停止串比段长", "abc", (4, 9), 2, "abcx", [3, 3, 3, 1], 150, 2),
        ("随机：重叠的短停止串", "ab", (1, 3), 3, "abx", [2, 2, 3], 60, 5),
        ("随机：一个字符一段", "ab", (2, 6), 4, "abx", [3, 3, 1], 100, 1),
        ("随机：很长的段", "abc", (2, 5), 3, "abcd", [2, 2, 2, 3], 300, 40),
        ("随机：中文", "你好。", (2, 4), 3, "你好。的", [2, 2, 2, 1], 80, 3),
        ("随机：很多短停止串，整段到达", "ab", (2, 4), 5, "abx", [3, 3, 1], 120, 60),
    ]
    for name, stop_alphabet, lens, n, alphabet, weights, length, max_piece in specs:
        for k, plants in enumerate((0, 1, 2)):
            out.append(_random_case(rng, f"{name} #{k + 1}", stop_alphabet, lens, n, alphabet,
                                    weights, length, max_piece, plants))
    for k, max_piece in enumerate((1, 3, 5, 10, 40, 100)):
        out.append(_nested_case(rng, f"随机：短的停止串藏在长的里面 #{k + 1}", max_piece, False))
    for k, max_piece in enumerate((2, 20)):
        out.append(_nested_case(rng, f"随机：短的停止串是长的后缀 #{k + 1}", max_piece, True))
    return out
