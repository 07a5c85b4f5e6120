"""Exercise 2401: n-gram speculative decoding against a known greedy output."""


def ngram_speculate(prompt: list[int], target: list[int], k: int,
                    max_ngram: int, min_ngram: int) -> dict:
    # TODO 1: 参数检查：ValueError
    # TODO 2: target[0] 来自 prefill（不算步数）
    # TODO 3: 每一步：m = min(k, 剩余 - 1)；m > 0 时按规则 2 找猜测（最长的 n 优先，最近的匹配优先）
    # TODO 4: 逐个比较猜测和 target，接受相同的前缀，再加上 target 在下一个位置的 token
    # TODO 5: 返回 tokens、steps、guessed、accepted
    raise NotImplementedError("请实现 ngram_speculate")
