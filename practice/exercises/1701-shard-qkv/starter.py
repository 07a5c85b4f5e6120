"""Exercise 1701: the rows of a merged [q; k; v] weight that one tensor-parallel rank keeps."""


def shard_qkv(weight: list[list[float]], num_qo_heads: int, num_kv_heads: int, head_dim: int,
              rank: int, tp: int) -> list[list[float]]:
    # TODO 1: 参数不合法（rank 越界、行数不对、头数切不开）：抛 ValueError
    # TODO 2: q 部分：本 rank 的 num_qo_heads / tp 个头，连续的行
    # TODO 3: k、v 部分：num_kv_heads >= tp 时切开；否则复制本 rank 读的那一个 KV 头
    # TODO 4: 按 q、k、v 的顺序拼起来返回（新的列表）
    raise NotImplementedError("请实现 shard_qkv")
