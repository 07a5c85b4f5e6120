"""Cases of exercise 1401. A body is built from a list of events whose payloads are known, so the
expected list comes straight from the generator; the model below (a parser over the whole body at
once, not over chunks) must agree with it, and also says where the [DONE] event ends, which tells
the learner's `run` after which chunk the connection hangs. Chunks travel as str, decoded with
surrogateescape (bytes that are not UTF-8, or half a character, become lone surrogates)."""

import json
import random

from judgekit.case import Case

DONE = "[DONE]"


def model(body: bytes) -> tuple[list, int | None]:
    """The payloads of a whole body, and the offset just past the [DONE] event (None: no [DONE])."""
    out, data, pos = [], [], 0
    while (end := body.find(b"\n", pos)) >= 0:
        line, pos = body[pos:end], end + 1
        if line.endswith(b"\r"):
            line = line[:-1]
        if line == b"":
            if data:
                payload, data = "\n".join(data), []
                if payload == DONE:
                    return out + [DONE], pos
                out.append(json.loads(payload))
            continue
        text = line.decode("utf-8")
        if text[0] == ":":
            continue
        name, colon, value = text.partition(":")
        if name == "data":
            data.append(value[1:] if value[:1] == " " else value)
    return out, None


def _chunk_of(chunks: list[bytes], offset: int) -> int:
    """The index of the chunk holding byte offset-1 (the last byte of the [DONE] event)."""
    total = 0
    for i, chunk in enumerate(chunks):
        total += len(chunk)
        if total >= offset:
            return i
    raise AssertionError("offset past the body")


def _case(name, chunks: list[bytes], want: list, visible=False) -> Case:
    got, done_end = model(b"".join(chunks))
    assert got == want, (name, got, want)
    done_at = None if done_end is None else _chunk_of(chunks, done_end)
    shown = [c.decode("utf-8", "surrogateescape") for c in chunks]
    return Case(name, {"chunks": shown, "done_at": done_at}, want, visible=visible)


def _split(rng, body: bytes, max_chunk: int, empty_share: float = 0.05) -> list[bytes]:
    chunks, pos = [], 0
    while pos < len(body):
        if rng.random() < empty_share:
            chunks.append(b"")
        step = rng.randint(1, max_chunk)
        chunks.append(body[pos : pos + step])
        pos += step
    return chunks


def _at(body: bytes, *cuts: int) -> list[bytes]:
    edges = [0, *cuts, len(body)]
    return [body[a:b] for a, b in zip(edges, edges[1:])]


# ---- random bodies -----------------------------------------------------------------------------
WORDS = ["你好", "，", "世界", "😀", "é", "Hello", " ", "\n", "\"", "\\", "token", "。", "𝄞", "\t", ":"]


def _payload(rng, i: int) -> dict:
    content = "".join(rng.choice(WORDS) for _ in range(rng.randint(0, 5)))
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": None}
    if rng.random() < 0.2:
        choice["finish_reason"] = rng.choice(["stop", "length"])
    event = {"id": f"cmpl-{i}", "object": "chat.completion.chunk", "choices": [choice]}
    if rng.random() < 0.2:
        event["usage"] = {"prompt_tokens": rng.randint(1, 99), "completion_tokens": i}
    return event


def _data_lines(rng, payload: dict, loose: bool) -> list[str]:
    text = json.dumps(payload, ensure_ascii=rng.random() < 0.3,
                      indent=2 if rng.random() < 0.3 else None)
    values = text.split("\n")
    if loose and len(values) > 1 and rng.random() < 0.3:
        values.insert(rng.randint(1, len(values) - 1), "")  # an empty data value: one more "\n"
    lines = []
    for v in values:
        if v == "":
            lines.append(rng.choice(["data", "data:"]))
        else:
            lines.append(("data: " if rng.random() < 0.8 else "data:") + v)
    return lines


def _noise(rng) -> str:
    return rng.choice([": keep-alive", ":", ": 注释", "event: message", "event: delta", "id: 7",
                       "id:", "retry: 1000", "Data: 不是 data 字段", "data : 也不是", "dat: x",
                       "event"])


def _random_body(rng, n_events: int, newline: str, done: str, loose: bool) -> tuple[bytes, list]:
    """done: "done" ([DONE], then junk that must not be read), "close" (no [DONE]), "cut" (no
    [DONE], and the last event never gets its blank line)."""
    parts, want = [], []

    def nl() -> str:
        return rng.choice(["\n", "\r\n"]) if newline == "mixed" else newline

    def emit(lines: list[str]) -> None:
        parts.append("".join(line + nl() for line in lines) + nl())
        if loose and rng.random() < 0.1:
            parts.append(nl())  # a stray blank line dispatches nothing

    for i in range(n_events):
        r = rng.random()
        if loose and r < 0.1:
            emit([_noise(rng) for _ in range(rng.randint(1, 2))])  # an event with no data
            continue
        payload = _payload(rng, i)
        lines = _data_lines(rng, payload, loose)
        if loose:
            for _ in range(rng.randint(0, 2)):
                lines.insert(rng.randint(0, len(lines)), _noise(rng))
        emit(lines)
        want.append(payload)
    if done == "done":
        emit([rng.choice(["data: [DONE]", "data:[DONE]"])])
        want.append(DONE)
        body = "".join(parts).encode()
        junk = rng.choice([b"", b"data: not json\n\n", b"data: {\"id\": 1}\n\n\xff\xfe\n\n",
                           b"\x80garbage", b"data: [DONE]\n\n"])
        return body + junk, want
    body = "".join(parts).encode()
    if done == "cut":
        body += ("data: " + json.dumps(_payload(rng, n_events)) + nl()).encode()
    return body, want


def _random_case(rng, name, n_events, newline, done, max_chunk, loose=True) -> Case:
    body, want = _random_body(rng, n_events, newline, done, loose)
    return _case(name, _split(rng, body, max_chunk), want)


def cases() -> list:
    rng = random.Random(1401)
    ex1 = ('data: {"choices": [{"delta": {"content": "你好"}}]}\n\n'
           'data: {"choices": [{"delta": {"content": "！"}}]}\n\n'
           "data: [DONE]\n\n").encode()
    cut1 = ex1.index("你".encode()) + 1  # inside 你
    cut2 = ex1.index(b"\n\n") + 1  # between the two \n
    ex2 = (": keep-alive\n\n"
           "event: message\nid: 1\ndata: {\"a\": 1,\ndata:  \"b\": [1, 2]}\n\n"
           "data:{\"c\": \"x\"}\r\n\r\n"
           "data: [DONE]\n\n"
           "data: 之后的内容不看\n\n").encode()
    crlf = (b'data: {"n": 1}\r\n\r\ndata: {"n": 2}\r\n\r\ndata: [DONE]\r\n\r\n')
    out = [
        _case("示例 1：块的边界在汉字中间、在 \\n\\n 中间", _at(ex1, cut1, cut2),
              [{"choices": [{"delta": {"content": "你好"}}]},
               {"choices": [{"delta": {"content": "！"}}]}, DONE], visible=True),
        _case("示例 2：注释、其他字段、多行 data、没有空格的 data:、\\r\\n", _at(ex2, 6, ex2.index(b"\r") + 1),
              [{"a": 1, "b": [1, 2]}, {"c": "x"}, DONE], visible=True),
        _case("每个字节一块", [bytes([b]) for b in ex1], [
            {"choices": [{"delta": {"content": "你好"}}]},
            {"choices": [{"delta": {"content": "！"}}]}, DONE]),
        _case("\\r\\n 换行，边界在 \\r 和 \\n 之间",
              _at(crlf, crlf.index(b"\r") + 1, crlf.index(b"\r\n\r\n") + 3, len(crlf) - 1),
              [{"n": 1}, {"n": 2}, DONE]),
        _case("[DONE] 之后同一块里的内容不看（不是 JSON，甚至不是 UTF-8）",
              [b'data: {"n": 1}\n\ndata: [DONE]\n\ndata: oops\n\n\xff\xfe\n\n', b"data: {}\n\n"],
              [{"n": 1}, DONE]),
        _case("[DONE] 之后不再读下一块",
              [b'data: {"n": 1}\n\n', b"data: [DONE]\n", b"\n", b"data: {}\n\n"],
              [{"n": 1}, DONE]),
        _case("没有 [DONE]：连接关闭，没有空行收尾的最后一个事件丢掉",
              [b'data: {"n": 1}\n\ndata: {"n"', b': 2}\n'], [{"n": 1}]),
        _case("空的响应、只有注释", [b"", b": ping\n\n", b":\n\n", b""], []),
        _case("不是 data 的字段：Data、data 加空格、dat、没有冒号的 event",
              [b'Data: {"x": 1}\ndata : {"x": 2}\ndat: 3\nevent\ndata: {"x": 4}\n\n'
               b"data: [DONE]\n\n"], [{"x": 4}, DONE]),
        _case("没有冒号的 data 行是一个空值（多一个换行）",
              [b'data: {"x":\ndata\ndata: [1,\ndata:\ndata: 2]}\n\n', b"data: [DONE]\n\n"],
              [{"x": [1, 2]}, DONE]),
        _case("连续几个空行、空块", [b"\n\n", b"", b'data: {"n": 1}\n', b"", b"\n\n\n",
                                  b'data: {"n": 2}\n\n', b"", b"data: [DONE]\n\n"],
              [{"n": 1}, {"n": 2}, DONE]),
        _case("只含其他字段的事件不产生结果",
              [b"event: ping\nid: 3\nretry: 10\n\n", b'data: {"n": 1}\n\ndata: [DONE]\n\n'],
              [{"n": 1}, DONE]),
    ]
    plans = [
        ("随机：\\n，小块", 12, "\n", "done", 4),
        ("随机：\\r\\n，小块", 12, "\r\n", "done", 4),
        ("随机：混合换行，一个字节一块", 6, "mixed", "done", 1),
        ("随机：大块", 40, "mixed", "done", 300),
        ("随机：没有 [DONE]", 10, "\n", "close", 7),
        ("随机：没有 [DONE]，最后一个事件不完整", 10, "mixed", "cut", 5),
        ("随机：很多事件", 80, "mixed", "done", 64),
        ("随机：中等的块", 20, "\r\n", "done", 16),
    ]
    for name, n, newline, done, max_chunk in plans:
        out.append(_random_case(rng, name, n, newline, done, max_chunk))
    out.append(_random_case(rng, "随机：只有 data 行", 30, "\n", "done", 9, loose=False))
    return out
