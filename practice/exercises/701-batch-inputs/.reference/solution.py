"""Reference solution of exercise 701."""


def build_batch(reqs: list[dict], page_table: list[list[int]]) -> dict:
    input_ids, positions, out_loc, last = [], [], [], []
    for req in reqs:
        start, n = req["cached_len"], req["extend_len"]
        if n < 1 or start < 0 or start + n > len(req["input_ids"]):
            raise ValueError(f"bad request: cached_len {start}, extend_len {n}")
        row = page_table[req["table_idx"]]
        input_ids += req["input_ids"][start : start + n]
        positions += range(start, start + n)
        out_loc += [row[p] for p in range(start, start + n)]
        last.append(len(input_ids) - 1)
    return {"input_ids": input_ids, "positions": positions, "out_loc": out_loc,
            "last_indices": last}
