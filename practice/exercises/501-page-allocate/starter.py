"""Exercise 501: give a request the KV slots of positions [alloc_len, upto), a page at a time."""


def allocate_slots(page_size: int, free_pages: list[int], alloc_len: int, upto: int) -> dict | None:
    # TODO 1: alloc_len 不是 page_size 的非负整数倍时抛 ValueError
    # TODO 2: upto <= alloc_len：什么都不用分配
    # TODO 3: 需要的页数向上取整；空闲页不够时返回 None
    # TODO 4: 从 free_pages 的末尾依次取页，slot = page * page_size + offset
    raise NotImplementedError("请实现 allocate_slots")
