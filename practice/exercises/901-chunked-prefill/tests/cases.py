"""Cases of exercise 901. Expected values come from the token-by-token model below: it hands out
the budget one token at a time to the request at the head, and counts a lone prompt's batches by
running whole batches until nothing is left, instead of using min() and a ceiling division."""

import random

from judgekit.case import Case


def model_chunks(remaining: list[int], budget: int) -> list[int]:
    chunks = []
    for need in remaining:
        got = 0
        while got < need and budget > 0:
            got += 1
            budget -= 1
        if got:
            chunks.append(got)
        if got < need:
            break
    return chunks


def model_batches(prompt_len: int, budget: int) -> int:
    batches, left = 0, prompt_len
    while left > 0:
        left -= model_chunks([left], budget)[0]
        batches += 1
    return batches


def _case(name, remaining, budget, visible=False) -> Case:
    args = {"remaining": list(remaining), "budget": budget}
    if budget < 1:
        return Case(name, args, raises="ValueError", visible=visible)
    expected = {"chunks": model_chunks(remaining, budget),
                "batches": [model_batches(n, budget) for n in remaining]}
    return Case(name, args, expected, visible=visible)


def cases() -> list:
    rng = random.Random(901)
    out = [
        _case("示例 1：第三个请求被切开", [300, 200, 900, 50], 1000, visible=True),
        _case("示例 2：队头就比预算长", [2500, 10], 1000, visible=True),
        _case("示例 3：恰好用完预算", [600, 400, 7], 1000, visible=True),
        _case("空队列", [], 64),
        _case("预算为 0", [5], 0),
        _case("预算为 1", [3, 1, 2], 1),
        _case("全部放得下还有剩", [1, 2, 3], 100),
        _case("切在最后一个请求", [10, 10, 10], 25),
        _case("长度等于预算的整数倍", [4096, 8192], 2048),
    ]
    for i in range(10):
        budget = rng.choice([16, 64, 128, 512, 8192])
        remaining = [rng.randint(1, 3 * budget) if rng.random() < 0.3 else rng.randint(1, budget // 2)
                     for _ in range(rng.randint(1, 12))]
        out.append(_case(f"随机 {i + 1}", remaining, budget))
    return out
