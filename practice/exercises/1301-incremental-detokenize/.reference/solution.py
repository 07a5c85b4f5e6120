"""Reference solution of exercise 1301."""

SPACE = "\u2581"  # "▁"：词表里写在词前面、表示一个空格的记号（SentencePiece 的写法）
REPLACEMENT_CHAR = "\ufffd"


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
        self.prefix_offset = 0  # start of the context window
        self.read_offset = 0  # ids before this are emitted

    def feed(self, ids: list[int]) -> str:
        self.ids += ids
        context, window = self._texts()
        if len(window) <= len(context) or window.endswith(REPLACEMENT_CHAR):
            return ""
        return self._emit(window[len(context) :])

    def finish(self) -> str:
        context, window = self._texts()
        return self._emit(window[len(context) :])

    def _texts(self) -> tuple[str, str]:
        context = self.ids[self.prefix_offset : self.read_offset]
        window = self.ids[self.prefix_offset :]
        return (self.decode(context) if context else ""), (self.decode(window) if window else "")

    def _emit(self, piece: str) -> str:
        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
        return piece


def run(vocab: list[str], groups: list[list[int]]) -> dict:
    # 判题调用的是这个函数，不用改它
    decode = make_decode([bytes.fromhex(piece) for piece in vocab])
    detok = IncrementalDetokenizer(decode)
    steps = [detok.feed(list(group)) for group in groups]
    tail = detok.finish()
    return {"steps": steps, "finish": tail, "text": "".join(steps) + tail}
