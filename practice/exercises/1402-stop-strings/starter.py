"""Exercise 1402: end a streamed answer at the stop string that is complete first."""


class StopChecker:
    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]  # 空串不算停止串
        self.stopped = False
        # TODO: 记下还没发出去的那段尾巴

    def feed(self, piece: str) -> str:
        # TODO 1: 已经停止了就返回 ""
        # TODO 2: 到目前为止的文本里出现了停止串：stopped = True。取"最先完整"的那个（结束位置最小；
        #         结束位置相同时取最长的），返回到它的开头为止的新文本
        # TODO 3: 否则留下"最长的、还可能长成停止串的尾巴"，其余的全部返回
        return piece

    def flush(self) -> str:
        # TODO: 流结束了：没停止的话，留着的尾巴不会再变成停止串，把它返回
        return ""


def run(stops: list[str], pieces: list[str]) -> dict:
    # 判题调用的是这个函数，不用改它
    checker = StopChecker(list(stops))
    steps = []
    for piece in pieces:
        out = checker.feed(piece)
        steps.append([out, checker.stopped])
    tail = checker.flush()
    text = "".join(out for out, _ in steps) + tail
    return {"text": text, "stopped": checker.stopped, "steps": steps, "flush": tail}
