"""Reference solution of exercise 1501."""


def plan_decode_step(max_bs: int, kv_lens: list[int], table_idx: list[int], out_loc: list[int],
                     scratch_slot: int) -> dict:
    if not kv_lens or not len(kv_lens) == len(table_idx) == len(out_loc):
        raise ValueError("a decode batch needs one kv_len, table row and KV slot per request")
    sizes = [] if max_bs < 1 else [s for s in (1, 2, 4) if s < max_bs] + \
        list(range(8, max_bs, 8)) + [max_bs]
    graph_bs = next((s for s in sizes if s >= len(kv_lens)), None)
    pad = 0 if graph_bs is None else graph_bs - len(kv_lens)
    return {
        "sizes": sizes,
        "graph_bs": graph_bs,
        "kv_lens": list(kv_lens) + [0] * pad,
        "table_idx": list(table_idx) + [0] * pad,
        "out_loc": list(out_loc) + [scratch_slot] * pad,
    }
