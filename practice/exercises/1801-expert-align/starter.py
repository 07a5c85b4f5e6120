"""Exercise 1801: sort the (token, expert) pairs by expert, each expert's run padded to blocks."""


def align_to_experts(topk_ids: list[list[int]], num_experts: int, block_m: int) -> dict:
    # TODO 1: 检查输入：block_m、num_experts 至少为 1；每个 token 的 k 相同；专家编号在 [0, num_experts) 内；否则抛 ValueError
    # TODO 2: 把 topk_ids 按行展平：第 p 个 pair 是 token p // k 的第 p % k 个选择
    # TODO 3: 缓冲区行数 rows = num_pairs + min(num_experts, num_pairs) * (block_m - 1)，向上取整到 block_m 的倍数
    # TODO 4: 按专家编号从小到大，依次放入该专家的 pair（保持原顺序），再用哨兵 num_pairs 补齐到 block_m 的倍数
    # TODO 5: 每块记下它的专家；剩余的行填哨兵，剩余的块记 -1
    raise NotImplementedError("请实现 align_to_experts")
