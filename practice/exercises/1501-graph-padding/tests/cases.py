"""Cases of exercise 1501. Expected values come from the model below, which walks every batch size
from 1 to max_bs and keeps those the rule names, then pads row by row, instead of building the
ladder from ranges."""

import random

from judgekit.case import Case


def model(max_bs: int, kv_lens: list[int], table_idx: list[int], out_loc: list[int],
          scratch_slot: int):
    n = len(kv_lens)
    if n == 0 or len(table_idx) != n or len(out_loc) != n:
        return "ValueError"
    sizes = []
    for s in range(1, max_bs + 1):
        if s in (1, 2, 4) or s % 8 == 0 or s == max_bs:
            sizes.append(s)
    fits = [s for s in sizes if s >= n]
    graph_bs = min(fits) if fits else None
    lens, rows, slots = list(kv_lens), list(table_idx), list(out_loc)
    while graph_bs is not None and len(lens) < graph_bs:
        lens.append(0)  # a padding row attends over nothing
        rows.append(0)  # any valid page-table row: with length 0 it is never read
        slots.append(scratch_slot)  # its K/V land where no request owns a slot
    return {"sizes": sizes, "graph_bs": graph_bs, "kv_lens": lens, "table_idx": rows,
            "out_loc": slots}


def _case(name, max_bs, kv_lens, table_idx, out_loc, scratch_slot, visible=False) -> Case:
    args = {"max_bs": max_bs, "kv_lens": kv_lens, "table_idx": table_idx, "out_loc": out_loc,
            "scratch_slot": scratch_slot}
    expected = model(max_bs, kv_lens, table_idx, out_loc, scratch_slot)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def _batch(rng: random.Random, n: int, rows: int, slots: int):
    kv_lens = [rng.randint(1, 4096) for _ in range(n)]
    table_idx = rng.sample(range(rows), n)
    out_loc = rng.sample(range(slots), n)
    return kv_lens, table_idx, out_loc


def cases() -> list:
    rng = random.Random()
    out = [
        _case("示例 1：3 个请求补齐到 4", 16, [5, 9, 2], [3, 0, 7], [40, 81, 17], 1024,
              visible=True),
        _case("示例 2：批比上限大，即时执行", 4, [1, 2, 3, 4, 5], [0, 1, 2, 3, 4],
              [10, 11, 12, 13, 14], 99, visible=True),
        _case("示例 3：空批", 8, [], [], [], 64, visible=True),
        _case("上限为 0：不录图", 0, [7], [2], [30], 512),
        _case("上限为 1", 1, [3], [0], [5], 8),
        _case("上限为 3（不是 2 的幂）", 3, [1, 1, 1], [0, 1, 2], [4, 5, 6], 100),
        _case("刚好是阶梯上的大小", 24, *_batch(rng, 16, 64, 4096), 4096),
        _case("9 个请求补到 16", 256, *_batch(rng, 9, 256, 65536), 65536),
        _case("批等于上限", 20, *_batch(rng, 20, 32, 4096), 4096),
        _case("长度不一致", 8, [1, 2], [0], [3, 4], 10),
    ]
    for i in range(8):
        max_bs = rng.choice([rng.randint(1, 40), rng.randint(41, 512)])
        n = rng.randint(1, max_bs + 8)
        scratch = rng.randint(1000, 10**6)
        out.append(_case(f"随机 {i + 1}", max_bs, *_batch(rng, n, max(n, 600), scratch), scratch))
    return out
