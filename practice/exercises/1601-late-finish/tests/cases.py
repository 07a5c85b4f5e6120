"""Cases of exercise 1601. Expected values come from a closed form, not a simulation: a request
emits its samples up to its first eos or max_tokens (the loop without overlap); it is in the
prefill batch and in decode batches 1 .. min(max_tokens - 1, L) where L is its output length
(the host learns of an eos at index L only after launching batch L), and one sample is dropped
when it stopped on an eos before max_tokens."""

import random

from judgekit.case import Case


def model(max_tokens, sampled, eos):
    n = len(max_tokens)
    if n == 0 or len(sampled) != n or any(m < 1 or len(s) < m
                                          for m, s in zip(max_tokens, sampled)):
        return "ValueError"
    outputs, reasons, last = [], [], []
    dropped = 0
    for m, s in zip(max_tokens, sampled):
        head = s[:m]
        if eos in head:
            length = head.index(eos) + 1
            reasons.append("stop")
            dropped += length < m
        else:
            length = m
            reasons.append("length")
        outputs.append(head[:length])
        last.append(min(m - 1, length))
    batches = [[r for r in range(n) if k <= last[r]] for k in range(max(last) + 1)]
    return {"outputs": outputs, "reasons": reasons, "batches": batches, "dropped": dropped}


def _case(name, max_tokens, sampled, eos, visible=False) -> Case:
    args = {"max_tokens": max_tokens, "sampled": sampled, "eos": eos}
    expected = model(max_tokens, sampled, eos)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def _random(rng: random.Random, n: int, eos: int):
    max_tokens = [rng.randint(1, 12) for _ in range(n)]
    sampled = [[rng.choice([eos] + list(range(10, 20))) for _ in range(m + rng.randint(0, 3))]
               for m in max_tokens]
    return max_tokens, sampled


def cases() -> list:
    rng = random.Random()
    out = [
        _case("示例 1：一个请求按长度结束", [3], [[7, 8, 9]], 2, visible=True),
        _case("示例 2：结束符晚一步才知道", [5, 2], [[7, 2, 9, 9, 9], [4, 5]], 2, visible=True),
        _case("示例 3：没有请求", [], [], 2, visible=True),
        _case("max_tokens 为 1：只有 prefill", [1, 1, 1], [[3], [2], [4]], 2),
        _case("第一个 token 就是结束符", [4, 4], [[2, 9, 9, 9], [5, 6, 7, 8]], 2),
        _case("最后一个 token 是结束符：不浪费", [3], [[5, 6, 2]], 2),
        _case("结束符在 max_tokens 之后：不算", [2], [[5, 6, 2]], 2),
        _case("采样不够长", [3], [[5, 6]], 2),
        _case("max_tokens 为 0", [0], [[]], 2),
        _case("长度不一致", [2, 2], [[1, 1]], 2),
    ]
    for i in range(8):
        eos = rng.randint(0, 9)
        out.append(_case(f"随机 {i + 1}", *_random(rng, rng.randint(1, 8), eos), eos))
    return out
