"""Reference solution of exercise 501."""


def allocate_slots(page_size: int, free_pages: list[int], alloc_len: int, upto: int) -> dict | None:
    if alloc_len < 0 or alloc_len % page_size != 0:
        raise ValueError(f"alloc_len {alloc_len} is not a page multiple of {page_size}")
    free = list(free_pages)
    if upto <= alloc_len:
        return {"slots": [], "alloc_len": alloc_len, "free_pages": free}
    need = (upto - alloc_len + page_size - 1) // page_size
    if need > len(free):
        return None
    pages = [free.pop() for _ in range(need)]
    slots = [page * page_size + offset for page in pages for offset in range(page_size)]
    return {"slots": slots, "alloc_len": alloc_len + need * page_size, "free_pages": free}
