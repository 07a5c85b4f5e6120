"""Reference solution of exercise 1401."""

import json


def parse_sse(chunks) -> list:
    payloads: list = []
    data: list[str] = []  # the data values of the event being read
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")  # the last part is not a whole line yet
        for raw in lines:
            line = raw.removesuffix(b"\r").decode("utf-8")
            if not line:  # a blank line ends the event
                if data:
                    payload, data = "\n".join(data), []
                    if payload == "[DONE]":
                        payloads.append(payload)
                        return payloads
                    payloads.append(json.loads(payload))
                continue
            if line.startswith(":"):
                continue  # a comment
            name, _, value = line.partition(":")
            if name == "data":
                data.append(value.removeprefix(" "))
    return payloads  # the stream ended; an event without its blank line is dropped


class ConnectionStillOpen(Exception):
    pass


def run(chunks: list[str], done_at: int | None) -> list:
    # 判题调用的是这个函数，不用改它。chunks 的每一项是一块字节按 UTF-8 解码（surrogateescape）
    # 得到的 str，在这里变回 bytes；done_at 是 [DONE] 事件结束（它后面空行的最后一个字节）所在的块。
    # 服务器发完 [DONE] 就不再发数据，但连接不一定关：再要下一块会一直等下去，这里用一个异常代替
    def body():
        for i, chunk in enumerate(chunks):
            yield chunk.encode("utf-8", "surrogateescape")
            if i == done_at:
                raise ConnectionStillOpen("[DONE] 之后又去读下一块：真实的连接上这会一直等下去")

    return parse_sse(body())
