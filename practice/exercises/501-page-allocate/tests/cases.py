"""Cases of exercise 501. Expected values come from the position-by-position model below: it
walks the request's positions one at a time and opens a new page whenever a position starts one,
instead of computing the number of pages up front."""

import random

from judgekit.case import Case


def model(page_size: int, free_pages: list[int], alloc_len: int, upto: int):
    if alloc_len < 0 or alloc_len % page_size:
        return "ValueError"
    taken = 0  # pages handed out so far, counted from the end of the free list
    slots = []
    position = alloc_len
    while position < upto or position % page_size:
        if position % page_size == 0:
            if taken == len(free_pages):
                return None
            taken += 1
            page = free_pages[len(free_pages) - taken]
        slots.append(page * page_size + position % page_size)
        position += 1
    return {"slots": slots, "alloc_len": position,
            "free_pages": free_pages[: len(free_pages) - taken]}


def _case(name, page_size, free_pages, alloc_len, upto, visible=False) -> Case:
    args = {"page_size": page_size, "free_pages": list(free_pages), "alloc_len": alloc_len,
            "upto": upto}
    expected = model(**args)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def cases() -> list:
    out = [
        _case("示例 1：6 个位置，页大小 4", 4, [9, 2, 6], 0, 6, visible=True),
        _case("示例 2：最后一页还有空位", 4, [9], 8, 7, visible=True),
        _case("示例 3：再长一个 token", 4, [9], 8, 9, visible=True),
        _case("示例 4：空闲页不够", 4, [9], 8, 13, visible=True),
        _case("示例 5：alloc_len 不是整页", 4, [9, 2], 6, 10, visible=True),
        _case("页大小 1：一个 token 一页", 1, [5, 4, 3, 2, 1, 0], 2, 6),
        _case("恰好用完所有空闲页", 16, [3, 0, 7], 16, 64),
        _case("差一页就够", 16, [3, 0, 7], 16, 65),
        _case("upto 等于 alloc_len", 8, [1, 2], 16, 16),
        _case("空的空闲列表，不需要分配", 2, [], 4, 3),
        _case("空的空闲列表，需要分配", 2, [], 4, 5),
        _case("从 0 开始分配 1 个 token", 64, [11, 12], 0, 1),
        _case("alloc_len 为负", 4, [1], -4, 2),
    ]
    rng = random.Random(501)
    for i in range(12):
        page_size = rng.choice([1, 2, 4, 16, 64])
        num_pages = rng.randint(0, 40)
        free = rng.sample(range(200), num_pages)
        alloc_len = page_size * rng.randint(0, 10)
        upto = alloc_len + rng.randint(-3, page_size * (num_pages + 2))
        out.append(_case(f"随机 {i + 1}", page_size, free, alloc_len, max(upto, 0)))
    return out
