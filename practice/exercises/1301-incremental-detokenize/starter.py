"""Exercise 1301: token ids -> streamed text, holding back a character that is cut between tokens."""

SPACE = "\u2581"  # "▁"：词表里写在词前面、表示一个空格的记号（SentencePiece 的写法）


def make_decode(vocab: list[bytes]):
    """The toy tokenizer's decode(ids) -> str. 不用改它。"""

    def decode(ids: list[int]) -> str:
        text = b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")
        return text.replace(SPACE, " ").removeprefix(" ")  # 整段文本开头的一个空格去掉

    return decode


class IncrementalDetokenizer:
    def __init__(self, decode) -> None:
        self.decode = decode
        self.ids: list[int] = []
        # TODO: prefix_offset（上下文的开头）和 read_offset（之前的 id 都已经发出去了）

    def feed(self, ids: list[int]) -> str:
        # 这样是错的：每批 id 单独解码，汉字和表情会被切坏，空格也会丢（见题面）
        # TODO 1: 解码窗口 ids[prefix_offset:] 和上下文 ids[prefix_offset:read_offset]
        # TODO 2: 窗口的文本以 U+FFFD 结尾：最后一个字符还没完整，这次返回 ""，id 留到下次
        # TODO 3: 否则返回窗口比上下文多出来的文本，并把两个位置往后移
        self.ids += ids
        return self.decode(ids)

    def finish(self) -> str:
        # TODO: 流结束了：把扣下的部分全部返回（流真的断在字符中间时，它以 U+FFFD 结尾）
        return ""


def run(vocab: list[str], groups: list[list[int]]) -> dict:
    # 判题调用的是这个函数，不用改它
    decode = make_decode([bytes.fromhex(piece) for piece in vocab])
    detok = IncrementalDetokenizer(decode)
    steps = [detok.feed(list(group)) for group in groups]
    tail = detok.finish()
    return {"steps": steps, "finish": tail, "text": "".join(steps) + tail}
