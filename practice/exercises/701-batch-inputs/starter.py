"""Exercise 701: the flat inputs of one forward pass over several requests."""


def build_batch(reqs: list[dict], page_table: list[list[int]]) -> dict:
    # TODO 1: 检查每个请求：extend_len >= 1 且 cached_len + extend_len <= len(input_ids)，否则 ValueError
    # TODO 2: 每个请求的新 token 是 input_ids[cached_len : cached_len + extend_len]，按请求顺序拼起来
    # TODO 3: positions 是 cached_len, ..., cached_len + extend_len - 1
    # TODO 4: out_loc = page_table[table_idx][position]；last = extend_len 的前缀和 - 1
    raise NotImplementedError("请实现 build_batch")
