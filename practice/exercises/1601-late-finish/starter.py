"""Exercise 1601: overlap scheduling's timeline, with end-of-sequence tokens found one step late."""


def overlap_timeline(max_tokens: list[int], sampled: list[list[int]], eos: int) -> dict:
    # TODO 1: 参数不合法（没有请求、两个列表长度不同、max_tokens < 1、sampled[r] 比 max_tokens[r] 短）：抛 ValueError
    # TODO 2: 第 0 次 step()：发起 prefill 批（所有请求），每个请求采到 sampled[r][0]；主机端计数加一，
    #         计数达到 max_tokens 的请求离开运行集合
    # TODO 3: 第 k 次 step()（k >= 1）：先发起 decode 批（运行集合里的请求，按编号排序），再读第 k-1 批的结果：
    #         已经结束的请求的 token 丢掉（dropped 加一）；否则追加，遇到 eos 是 "stop"（离开运行集合），
    #         输出满 max_tokens 是 "length"
    # TODO 4: 没有可发起的批、也没有没读的批时停止；返回 outputs、reasons、batches、dropped
    raise NotImplementedError("请实现 overlap_timeline")
