"""Cases of exercise 1701. Expected values come from the model below, which labels every row of
the merged weight with its part and head and decides per head which ranks keep it, instead of
slicing ranges."""

import random

from judgekit.case import Case


def model(weight, num_qo_heads, num_kv_heads, head_dim, rank, tp):
    if tp < 1 or not 0 <= rank < tp or min(num_qo_heads, num_kv_heads, head_dim) < 1:
        return "ValueError"
    if len(weight) != (num_qo_heads + 2 * num_kv_heads) * head_dim or num_qo_heads % tp:
        return "ValueError"
    if (num_kv_heads >= tp and num_kv_heads % tp) or (num_kv_heads < tp and tp % num_kv_heads):
        return "ValueError"

    def q_owners(head):
        return {head // (num_qo_heads // tp)}

    def kv_owners(head):
        if num_kv_heads >= tp:
            return {head // (num_kv_heads // tp)}
        copies = tp // num_kv_heads  # neighbouring ranks share one head
        return set(range(head * copies, (head + 1) * copies))

    out = []
    for part, heads, owners in (("q", num_qo_heads, q_owners), ("k", num_kv_heads, kv_owners),
                                ("v", num_kv_heads, kv_owners)):
        base = {"q": 0, "k": num_qo_heads, "v": num_qo_heads + num_kv_heads}[part] * head_dim
        for head in range(heads):
            if rank in owners(head):
                for d in range(head_dim):
                    out.append(list(weight[base + head * head_dim + d]))
    return out


def _weight(rng, q, kv, head_dim, cols):
    return [[round(rng.uniform(-1, 1), 3) for _ in range(cols)]
            for _ in range((q + 2 * kv) * head_dim)]


def _case(name, weight, q, kv, head_dim, rank, tp, visible=False):
    args = {"weight": weight, "num_qo_heads": q, "num_kv_heads": kv, "head_dim": head_dim,
            "rank": rank, "tp": tp}
    expected = model(weight, q, kv, head_dim, rank, tp)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def cases() -> list:
    rng = random.Random()
    small = [[float(i)] for i in range(8)]  # q 4 heads, kv 2 heads of dim 1
    out = [
        _case("示例 1：4 个 q 头、2 个 KV 头、2 个 rank 中的 1 号", small[:8], 4, 2, 1, 1, 2,
              visible=True),
        _case("示例 2：1 个 KV 头复制给 2 个 rank", [[float(i)] for i in range(6)], 4, 1, 1, 0, 2,
              visible=True),
        _case("示例 3：9 个 q 头切不成 2 份", _weight(rng, 9, 3, 1, 2), 9, 3, 1, 0, 2,
              visible=True),
        _case("tp=1 原样返回", _weight(rng, 4, 2, 2, 3), 4, 2, 2, 0, 1),
        _case("SmolLM2 形状、tp=3", _weight(rng, 9, 3, 2, 2), 9, 3, 2, 2, 3),
        _case("KV 头 2 个、tp=4 的 3 号", _weight(rng, 8, 2, 2, 2), 8, 2, 2, 3, 4),
        _case("KV 头 2 个、tp=3：复制不均", _weight(rng, 6, 2, 1, 1), 6, 2, 1, 0, 3),
        _case("rank 越界", _weight(rng, 4, 2, 1, 1), 4, 2, 1, 2, 2),
        _case("负的 rank", _weight(rng, 4, 2, 1, 1), 4, 2, 1, -1, 2),
        _case("行数不对", _weight(rng, 4, 2, 1, 1)[:-1], 4, 2, 1, 0, 2),
        _case("KV 头 6 个切不成 4 份", _weight(rng, 8, 6, 1, 1), 8, 6, 1, 0, 4),
    ]
    for i in range(8):
        tp = rng.choice([1, 2, 4, 8])
        kv = rng.choice([k for k in (1, 2, 4, 8, 16) if k % tp == 0 or tp % k == 0])
        q = kv * rng.choice([1, 2, 4]) * max(1, tp // kv)
        head_dim = rng.choice([1, 2, 4])
        out.append(_case(f"随机 {i + 1}", _weight(rng, q, kv, head_dim, rng.randint(1, 4)), q, kv,
                         head_dim, rng.randrange(tp), tp))
    return out
