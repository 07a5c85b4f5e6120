"""Reference solution of exercise 1701."""


def shard_qkv(weight: list[list[float]], num_qo_heads: int, num_kv_heads: int, head_dim: int,
              rank: int, tp: int) -> list[list[float]]:
    if tp < 1 or not 0 <= rank < tp or num_qo_heads < 1 or num_kv_heads < 1 or head_dim < 1:
        raise ValueError("bad rank, size or head counts")
    if len(weight) != (num_qo_heads + 2 * num_kv_heads) * head_dim:
        raise ValueError("the weight does not have (q + 2 kv) * head_dim rows")
    if num_qo_heads % tp:
        raise ValueError("query heads do not split evenly")
    if num_kv_heads >= tp:
        if num_kv_heads % tp:
            raise ValueError("KV heads do not split evenly")
        kv_local, kv_first = num_kv_heads // tp, rank * (num_kv_heads // tp)
    else:
        if tp % num_kv_heads:
            raise ValueError("KV heads cannot be copied evenly")
        kv_local, kv_first = 1, rank // (tp // num_kv_heads)
    q_local = num_qo_heads // tp

    def rows(first_head: int, heads: int, offset: int) -> list[list[float]]:
        start = offset + first_head * head_dim
        return [list(row) for row in weight[start : start + heads * head_dim]]

    k_offset = num_qo_heads * head_dim
    v_offset = k_offset + num_kv_heads * head_dim
    return (rows(rank * q_local, q_local, 0) + rows(kv_first, kv_local, k_offset)
            + rows(kv_first, kv_local, v_offset))
