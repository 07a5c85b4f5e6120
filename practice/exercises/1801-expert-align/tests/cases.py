"""Cases of exercise 1801. Expected values come from the model below, which sorts the pairs with a
stable sort on the expert id and pads group by group, row by row, instead of bucketing."""

import random

from judgekit.case import Case


def model(topk_ids, num_experts, block_m):
    if block_m < 1 or num_experts < 1:
        return "ValueError"
    ks = {len(row) for row in topk_ids}
    if len(ks) > 1:
        return "ValueError"
    flat = [e for row in topk_ids for e in row]
    if any(e < 0 or e >= num_experts for e in flat):
        return "ValueError"
    n = len(flat)
    order = sorted(range(n), key=lambda p: flat[p])  # Python's sort is stable
    rows, blocks = [], []
    i = 0
    while i < n:
        expert = flat[order[i]]
        while i < n and flat[order[i]] == expert:
            rows.append(order[i])
            i += 1
        while len(rows) % block_m:
            rows.append(n)
        while len(blocks) < len(rows) // block_m:
            blocks.append(expert)
    used_experts = len({e for e in flat})
    capacity = n + min(num_experts, n) * (block_m - 1)
    while capacity % block_m:
        capacity += 1
    assert used_experts <= num_experts and len(rows) <= capacity
    rows += [n] * (capacity - len(rows))
    blocks += [-1] * (capacity // block_m - len(blocks))
    return {"sorted_pairs": rows, "block_expert": blocks}


def _case(name, topk_ids, num_experts, block_m, visible=False) -> Case:
    args = {"topk_ids": topk_ids, "num_experts": num_experts, "block_m": block_m}
    expected = model(topk_ids, num_experts, block_m)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def _routing(rng: random.Random, tokens: int, num_experts: int, top_k: int, allowed=None):
    pool = list(allowed if allowed is not None else range(num_experts))
    return [rng.sample(pool, top_k) for _ in range(tokens)]


def cases() -> list:
    rng = random.Random()
    out = [
        _case("示例 1：3 个 token、4 个专家、每个选 2 个，块大小 2",
              [[2, 0], [0, 3], [3, 2]], 4, 2, visible=True),
        _case("示例 2：专家 1 没有 token", [[0, 2], [2, 0]], 3, 4, visible=True),
        _case("示例 3：专家编号越界", [[0, 4]], 4, 2, visible=True),
        _case("没有 token", [], 8, 16),
        _case("块大小为 1：不需要补齐", [[1, 0], [0, 1]], 2, 1),
        _case("所有 token 都选同一个专家", [[5]] * 9, 6, 4),
        _case("只有最后一个专家有 token", [[7]] * 3, 8, 4),
        _case("k 不一致", [[0, 1], [2]], 4, 2),
        _case("负的专家编号", [[0, -1]], 4, 2),
        _case("块大小为 0", [[0]], 4, 0),
        _case("一个 token 选满所有专家", [list(range(8))[::-1]], 8, 16),
        _case("decode：64 个 token、128 个专家、top 8", _routing(rng, 64, 128, 8), 128, 16),
        _case("prefill：300 个 token、只用 5 个专家", _routing(rng, 300, 16, 2, [1, 4, 9, 10, 15]),
              16, 64),
    ]
    for i in range(6):
        num_experts = rng.randint(1, 40)
        top_k = rng.randint(1, num_experts)
        block_m = rng.choice([1, 2, 3, 4, 8, 16, 64])
        out.append(_case(f"随机 {i + 1}", _routing(rng, rng.randint(1, 120), num_experts, top_k),
                         num_experts, block_m))
    return out
