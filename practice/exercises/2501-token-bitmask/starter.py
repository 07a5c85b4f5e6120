"""Exercise 2501: the bitmask of the tokens a grammar (here a DFA) allows next."""


def token_bitmask(vocab: list[str], transitions: list[dict[str, int]],
                  accepting: list[int], state: int, eos_id: int) -> list[int]:
    # TODO 1: 参数检查：ValueError
    # TODO 2: 每个普通 token：从 state 出发逐个字符走转移，走完就允许（空文本不允许）
    # TODO 3: 结束符：state 可以结束时允许
    # TODO 4: 每 32 个 token 压成一个整数（token 32*w + j 是第 w 个整数的第 j 位），转成有符号 32 位
    raise NotImplementedError("请实现 token_bitmask")
