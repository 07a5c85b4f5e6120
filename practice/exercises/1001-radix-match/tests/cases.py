"""Cases of exercise 1001. Expected values come from the model below: the set of every
page-aligned prefix inserted so far. A match is the longest page multiple whose prefix is in the
set; an insert reports that length before adding its own prefixes. No tree at all."""

import random

from judgekit.case import Case


def model(page_size: int, ops: list) -> list[int]:
    prefixes = {()}
    results = []
    for op, ids in ops:
        limit = len(ids) - len(ids) % page_size
        found = max(k for k in range(0, limit + 1, page_size) if tuple(ids[:k]) in prefixes)
        results.append(found)
        if op == "insert":
            prefixes.update(tuple(ids[:k]) for k in range(page_size, limit + 1, page_size))
    return results


def _case(name, page_size, ops, visible=False) -> Case:
    ops = [[op, list(ids)] for op, ids in ops]
    return Case(name, {"page_size": page_size, "ops": ops}, model(page_size, ops),
                visible=visible)


def _random_ops(rng, page_size, num_ops, vocab, max_len, insert_share=0.5):
    """Sequences that share prefixes: each new one continues a prefix of an earlier one."""
    seen: list[list[int]] = [[]]
    ops = []
    for _ in range(num_ops):
        base = rng.choice(seen)
        cut = rng.randint(0, len(base))
        if rng.random() < 0.3:
            cut -= cut % page_size  # diverge exactly at a page boundary
        extra = rng.randint(0, max_len)
        ids = (base[:cut] + [rng.randrange(vocab) for _ in range(extra)])[:max_len]
        op = "insert" if rng.random() < insert_share else "match"
        ops.append([op, ids])
        if op == "insert":
            seen.append(ids)
    return ops


def cases() -> list:
    rng = random.Random(1001)
    example_4 = [
        ["insert", [1, 2, 3, 4, 5, 6, 7, 8, 9]],
        ["match", [1, 2, 3, 4, 5, 6, 7, 8]],
        ["match", [1, 2, 3, 4, 5, 6, 0, 0, 1]],
        ["insert", [1, 2, 3, 4, 5, 6, 0, 0]],
        ["match", [1, 2, 3, 4, 5, 6, 0, 0, 2]],
        ["insert", [1, 2, 3, 9]],
        ["match", [1, 2, 3]],
        ["match", [1, 2, 3, 9, 9]],
    ]
    example_1 = [
        ["insert", [5, 6, 7]],
        ["insert", [5, 6, 8]],
        ["match", [5, 6, 9]],
        ["match", [5, 7]],
        ["insert", [5, 6, 7, 1]],
    ]
    out = [
        _case("示例 1：页大小 4", 4, example_4, visible=True),
        _case("示例 2：页大小 1", 1, example_1, visible=True),
        _case("空树上匹配", 4, [["match", [1, 2, 3, 4]], ["match", []], ["insert", []],
                               ["match", [1, 2, 3, 4]]]),
        _case("重复插入同一个序列", 4, [["insert", [7] * 12]] * 3 + [["match", [7] * 20]]),
        _case("同一条边被拆两次", 1, [["insert", [1, 2, 3, 4, 5, 6]], ["insert", [1, 2, 3, 4, 0]],
                                  ["insert", [1, 2, 0]], ["match", [1, 2, 3, 4, 5, 0]],
                                  ["match", [1, 2, 0, 9]], ["match", [1, 2, 3, 4, 0, 0]]]),
        _case("第一页只差最后一个 token", 4, [["insert", [1, 1, 1, 1, 2, 2, 2, 2]],
                                         ["insert", [1, 1, 1, 2, 2, 2, 2, 2]],
                                         ["match", [1, 1, 1, 1, 2, 2, 2, 3]],
                                         ["match", [1, 1, 1, 2, 2, 2, 2, 2, 2]]]),
        _case("插入更长的延续", 4, [["insert", list(range(8))], ["insert", list(range(16))],
                                 ["insert", list(range(13))], ["match", list(range(15))],
                                 ["match", list(range(20))]]),
    ]
    for page_size in (1, 4):
        out.append(_case(f"随机：页大小 {page_size}，词表 2", page_size,
                         _random_ops(rng, page_size, 200, 2, 24)))
        out.append(_case(f"随机：页大小 {page_size}，词表 5", page_size,
                         _random_ops(rng, page_size, 300, 5, 40)))
        out.append(_case(f"随机：页大小 {page_size}，多数是匹配", page_size,
                         _random_ops(rng, page_size, 300, 3, 32, insert_share=0.2)))
        out.append(_case(f"随机：页大小 {page_size}，长序列", page_size,
                         _random_ops(rng, page_size, 60, 4, 300)))
    return out
