"""Exercise 101: how many tokens of KV cache fit in a memory budget."""


def kv_cache_budget(config: dict, budget_bytes: int, page_size: int, request_len: int) -> dict:
    # TODO: 按题面的规则算出 num_kv_heads、head_dim 和每个元素的字节数
    # TODO: bytes_per_token = 2 * 层数 * num_kv_heads * head_dim * 每元素字节数
    # TODO: 页数向下取整，每个请求占的页数向上取整
    raise NotImplementedError("请实现 kv_cache_budget")
