"""Cases of exercise 701. Expected values come from the model below: it first lists every new
token of the batch as a (request, position) pair, then reads each output off that list; the last
token of a request is found by searching the list, not by a prefix sum."""

import random

from judgekit.case import Case


def model(reqs: list[dict], page_table: list[list[int]]):
    tokens = []  # (request index, position) of every new token, in batch order
    for r, req in enumerate(reqs):
        begin, end = req["cached_len"], req["cached_len"] + req["extend_len"]
        if begin < 0 or end <= begin or end > len(req["input_ids"]):
            return "ValueError"
        tokens += [(r, p) for p in range(begin, end)]
    return {
        "input_ids": [reqs[r]["input_ids"][p] for r, p in tokens],
        "positions": [p for _, p in tokens],
        "out_loc": [page_table[reqs[r]["table_idx"]][p] for r, p in tokens],
        "last_indices": [max(i for i, (r, _) in enumerate(tokens) if r == k)
                         for k in range(len(reqs))],
    }


def _case(name, reqs, page_table, visible=False) -> Case:
    args = {"reqs": reqs, "page_table": page_table}
    expected = model(reqs, page_table)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def _req(ids, cached, extend, row) -> dict:
    return {"input_ids": list(ids), "cached_len": cached, "extend_len": extend, "table_idx": row}


def _page_table(rng, rows: int, width: int, page_size: int) -> list[list[int]]:
    """Each row maps positions to slots of its own pages, taken from a shuffled pool."""
    pages_per_row = width // page_size
    pool = list(range(rows * pages_per_row + 5))
    rng.shuffle(pool)
    table = []
    for r in range(rows):
        pages = pool[r * pages_per_row : (r + 1) * pages_per_row]
        table.append([pages[p // page_size] * page_size + p % page_size for p in range(width)])
    return table


def _random(rng, name, kind, num_reqs, page_size=4, width=64) -> Case:
    rows = num_reqs + rng.randint(0, 3)
    table = _page_table(rng, rows, width, page_size)
    order = rng.sample(range(rows), num_reqs)
    reqs = []
    for row in order:
        length = rng.randint(1, width)
        ids = [rng.randrange(50000) for _ in range(length)]
        if kind == "decode":
            cached, extend = length - 1, 1
        elif kind == "prefill":
            cached = rng.randint(0, (length - 1) // page_size) * page_size  # a page-aligned prefix
            extend = length - cached
        else:  # chunked: the last request gets only a part of its prompt
            cached = rng.randint(0, length - 1)
            extend = length - cached
        reqs.append(_req(ids, cached, extend, row))
    if kind == "chunked":
        last = reqs[-1]
        last["extend_len"] = rng.randint(1, last["extend_len"])
    return _case(name, reqs, table)


def cases() -> list:
    table = [[0, 1, 2, 3, 4, 5, 6, 7],
             [20, 21, 22, 23, 8, 9, 10, 11],
             [12, 13, 14, 15, 28, 29, 30, 31]]
    prefill = [_req([5, 6, 7], 0, 3, 2), _req([9, 8, 7, 6, 5, 4], 4, 2, 1)]
    decode = [_req([5, 6, 7, 42], 3, 1, 2), _req([9, 8, 7, 6, 5, 4, 17], 6, 1, 1),
              _req([1], 0, 1, 0)]
    rng = random.Random(701)
    out = [
        _case("示例 1：prefill，第二个请求有 4 个 token 的缓存前缀", prefill, table, visible=True),
        _case("示例 2：decode，每个请求 1 个新 token", decode, table, visible=True),
        _case("示例 3：extend_len 为 0", [_req([1, 2], 0, 2, 0), _req([3, 4], 2, 0, 1)], table,
              visible=True),
        _case("空的批次", [], table),
        _case("cached_len + extend_len 超出 input_ids", [_req([1, 2, 3], 1, 3, 0)], table),
        _case("cached_len 为负", [_req([1, 2, 3], -1, 2, 0)], table),
        _case("只算一部分新 token（分块 prefill 的一块）", [_req(list(range(100, 108)), 2, 3, 1)],
              table),
    ]
    for i in range(3):
        out.append(_random(rng, f"随机 prefill 批次 {i + 1}", "prefill", rng.randint(2, 8)))
        out.append(_random(rng, f"随机 decode 批次 {i + 1}", "decode", rng.randint(1, 16),
                           page_size=16, width=128))
        out.append(_random(rng, f"随机分块 prefill 批次 {i + 1}", "chunked", rng.randint(1, 6),
                           page_size=1, width=40))
    return out
