"""Cases of exercise 1301. Expected values come from the model below, which never decodes a window:
it looks at the bytes of all ids received so far. If they end in an incomplete UTF-8 character
(strict decoding fails), the feed returns ""; otherwise everything so far has been emitted, so the
feed returns what the decoded text of all ids so far adds to what was emitted. finish() returns the
rest of the decode (errors="replace") of all ids.

The toy tokenizer: ids 0-255 are the single bytes, the rest are merges of several bytes (learned
from random text, so many of them cut a character). A space is written as U+2581 ("▁") before
a word, and decode turns it back into a space and drops one space at the very start of the text.
Texts are tokenized greedily (the longest matching token first). The vocabulary travels to the
learner's process as hex strings."""

import random

from judgekit.case import Case

SPACE = "\u2581"
SPACE_BYTES = SPACE.encode()
REPLACEMENT = "\ufffd"

WORDS = ["hello", "world", "the", "token", "stream", "cache", "page", "batch", "kernel", "radix",
         "GPU", "is", "a", "of", "to", "42", "3.14", "ok", "Qwen3", "café", "naïve", "Привет",
         "αβγ", "Ärger", "ß"]
CJK = "你好世界流式输出分词器的是在了和中文字符模型推理缓存页表注意力"
CJK_PUNCT = "，。！？：、"
EMOJI = ["😀", "🚀", "🎉", "👍", "🌟", "🤖", "👍🏽", "🇨🇳", "❤️", "👨‍👩‍👧"]
ASCII_PUNCT = [",", ".", "!", "?", "\n", "\n\n", ":", "\"", "(", ")"]


# ---- the toy tokenizer -------------------------------------------------------------------------
def decode(vocab: list[bytes], ids: list[int], strict: bool = False) -> str | None:
    """The decode the learner's code is given (strict=False). strict=True: None when the bytes do
    not decode (here: they end in an incomplete character)."""
    raw = b"".join(vocab[i] for i in ids)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        assert e.end == len(raw) and e.reason == "unexpected end of data", "only the end is cut"
        if strict:
            return None
        text = raw.decode("utf-8", errors="replace")
    return text.replace(SPACE, " ").removeprefix(" ")


def tokenize(vocab: list[bytes], text: str) -> list[int]:
    """Greedy longest match over the bytes of text, spaces written as U+2581."""
    index = {piece: i for i, piece in enumerate(vocab)}
    longest = max(map(len, vocab))
    data = text.replace(" ", SPACE).encode()
    ids, pos = [], 0
    while pos < len(data):
        for n in range(min(longest, len(data) - pos), 0, -1):
            if data[pos : pos + n] in index:
                ids.append(index[data[pos : pos + n]])
                pos += n
                break
    return ids


def random_text(rng, segments: int) -> str:
    out = []
    for _ in range(segments):
        r = rng.random()
        if r < 0.4:
            out.append(" " + rng.choice(WORDS))
        elif r < 0.65:
            out.append("".join(rng.choice(CJK) for _ in range(rng.randint(1, 4))))
            if rng.random() < 0.3:
                out.append(rng.choice(CJK_PUNCT))
        elif r < 0.8:
            out.append(rng.choice(EMOJI))
        elif r < 0.9:
            out.append(rng.choice(ASCII_PUNCT))
        else:
            out.append(rng.choice(WORDS))
    return "".join(out)


def random_vocab(rng, merges: int) -> list[bytes]:
    """256 single bytes, then merges cut out of random text: words that start with the space mark,
    byte windows at random offsets (they often hold part of a character) and whole characters."""
    corpus = [random_text(rng, 40).replace(" ", SPACE).encode() for _ in range(6)]
    found: set[bytes] = set()
    while len(found) < merges:
        data = rng.choice(corpus)
        r = rng.random()
        if r < 0.35:
            starts = [i for i in range(len(data)) if data.startswith(SPACE_BYTES, i)]
            start = rng.choice(starts) if starts else 0
            piece = data[start : start + len(SPACE_BYTES) + rng.randint(1, 6)]
        elif r < 0.75:
            start = rng.randrange(len(data))
            piece = data[start : start + rng.randint(2, 6)]
        else:
            text = data.decode()
            start = rng.randrange(len(text))
            piece = text[start : start + rng.randint(1, 2)].encode()
        if len(piece) >= 2:
            found.add(piece)
    extra = sorted(found)
    rng.shuffle(extra)
    return [bytes([b]) for b in range(256)] + extra


# ---- the model ---------------------------------------------------------------------------------
def model(vocab: list[bytes], groups: list[list[int]]) -> dict:
    ids, emitted, steps = [], "", []
    for group in groups:
        ids += group
        text = decode(vocab, ids, strict=True)
        if text is None:  # the bytes so far end in an incomplete character: hold everything back
            steps.append("")
            continue
        assert text.startswith(emitted)
        steps.append(text[len(emitted) :])
        emitted = text
    whole = decode(vocab, ids)
    assert whole.startswith(emitted)
    tail = whole[len(emitted) :]
    cut = decode(vocab, ids, strict=True) is None
    assert all(REPLACEMENT not in s for s in steps)
    assert (REPLACEMENT in tail) == cut and (not cut or tail.endswith(REPLACEMENT))
    return {"steps": steps, "finish": tail, "text": "".join(steps) + tail}


def _case(name, vocab, groups, visible=False) -> Case:
    groups = [list(g) for g in groups]
    want = model(vocab, groups)
    assert want["text"] == decode(vocab, [i for g in groups for i in g])
    args = {"vocab": [piece.hex() for piece in vocab], "groups": groups}
    return Case(name, args, want, visible=visible)


def _groups(rng, ids: list[int], max_group: int, empty_share: float = 0.0) -> list[list[int]]:
    groups, pos = [], 0
    while pos < len(ids):
        if rng.random() < empty_share:
            groups.append([])
        step = rng.randint(1, max_group)
        groups.append(ids[pos : pos + step])
        pos += step
    return groups


def _cut_ids(rng, vocab, ids: list[int]) -> list[int]:
    """ids cut after a token that ends in the middle of a character (in the second half if can)."""
    cuts = [n for n in range(1, len(ids) + 1) if decode(vocab, ids[:n], strict=True) is None]
    late = [n for n in cuts if n > len(ids) // 2]
    assert cuts, "no token ends in the middle of a character"
    return ids[: rng.choice(late or cuts)]


# ---- the vocabulary of the examples ------------------------------------------------------------
EXAMPLE_MERGES = [
    b"hello",  # 256
    SPACE_BYTES + b"world",  # 257 "▁world"
    "你".encode()[:2],  # 258 e4 bd
    "你".encode()[2:] + "好".encode()[:2],  # 259 a0 e5 a5
    "好".encode()[2:] + b"!",  # 260 bd 21
    "😀".encode()[:2],  # 261 f0 9f
    "😀".encode()[2:],  # 262 98 80
    SPACE_BYTES,  # 263 "▁"
]
EXAMPLE_VOCAB = [bytes([b]) for b in range(256)] + EXAMPLE_MERGES


def cases() -> list:
    rng = random.Random(1301)
    ex = EXAMPLE_VOCAB
    out = [
        _case("示例 1：空格记号要看前文", ex, [[256], [257]], visible=True),
        _case("示例 2：汉字被切在两个 token 之间", ex, [[72], [258], [259], [260]], visible=True),
        _case("示例 3a：表情分两批到达", ex, [[256, 261], [262]], visible=True),
        _case("示例 3b：流在字符中间结束", ex, [[256], [261]], visible=True),
        _case("示例 3c：流在字符中间结束，一批到达", ex, [[256, 261]], visible=True),
        _case("没有任何 id", ex, []),
        _case("空的批", ex, [[], [256], [], [257], []]),
        _case("开头就是空格记号", ex, [[257], [257], [256]]),
        _case("只有空格记号", ex, [[263], [263], [120], [263]]),
        _case("表情拆成四个单字节 token", ex, [[b] for b in "😀".encode()] + [[33]]),
        _case("连续几批都没说完", ex, [[256], [258], [259], [260, 261], [262]]),
        _case("扣下的 token 等到下一批才说完", ex, [[256, 258], [259, 260, 257]]),
        _case("空格记号本身被切开", ex, [[256], [SPACE_BYTES[0]], [SPACE_BYTES[1]],
                                      [SPACE_BYTES[2]], [119], [263, 111]]),
        _case("截断在单字节 token 上", ex, [[b] for b in "好".encode()[:2]]),
        _case("整段一批到达", ex, [[256, 257, 258, 259, 260, 261, 262]]),
    ]
    vocabs = [random_vocab(rng, n) for n in (60, 150, 300, 600)]
    specs = [
        # name, segments, max group, empty share, cut at the end
        ("随机：一次一个 id", 40, 1, 0.0, False),
        ("随机：一次一个 id，流被截断", 40, 1, 0.0, True),
        ("随机：每批 1-3 个 id", 60, 3, 0.0, False),
        ("随机：每批 1-3 个 id，流被截断", 60, 3, 0.0, True),
        ("随机：每批 1-8 个 id，有空批", 80, 8, 0.15, False),
        ("随机：每批 1-8 个 id，有空批，流被截断", 80, 8, 0.15, True),
        ("随机：大批", 150, 40, 0.0, False),
        ("随机：大批，流被截断", 150, 40, 0.0, True),
    ]
    for name, segments, max_group, empty_share, cut in specs:
        for k, vocab in enumerate(vocabs):
            text = random_text(rng, segments)
            ids = tokenize(vocab, text)
            assert decode(vocab, ids) == text.removeprefix(" ")
            if cut:
                ids = _cut_ids(rng, vocab, ids)
            out.append(_case(f"{name} #{k + 1}", vocab, _groups(rng, ids, max_group, empty_share)))
    return out
