"""Exercise 1401: the data payloads of a server-sent-events body that arrives in byte chunks."""

import json


def parse_sse(chunks) -> list:
    # chunks：可迭代对象，每次给出一块 bytes；块的边界可以在任何地方（一个汉字中间、"\n\n" 中间）
    # TODO 1: 把字节攒起来，按 b"\n" 切出完整的行（行尾的 b"\r" 去掉），再解码成 str
    # TODO 2: 以 ":" 开头的行是注释；其余的行是 "字段: 值"，只关心字段 data，其余字段忽略
    # TODO 3: 空行结束一个事件：它的各个 data 值用 "\n" 连起来；"[DONE]" 原样放进结果并立刻返回，
    #         其余的用 json.loads 解析后放进结果；没有 data 行的事件不产生结果
    raise NotImplementedError("请实现 parse_sse")


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
