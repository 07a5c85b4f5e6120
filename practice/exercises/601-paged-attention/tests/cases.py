"""Cases of exercise 601. Expected values come from the loop model below: for every new token and
every query head it gathers the visible keys one slot at a time and does the softmax by hand in
float64. It never calls scaled_dot_product_attention and never builds a mask."""

import math

import torch
from judgekit.case import Case

TOL = 1e-4


def model(q, k_cache, v_cache, slots) -> torch.Tensor:
    q_len, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    kv_len = len(slots)
    cached = kv_len - q_len
    out = torch.zeros(q_len, num_heads, head_dim, dtype=torch.float64)
    for i in range(q_len):
        visible = [int(s) for s in slots[: cached + i + 1]]  # positions 0 .. cached + i
        for h in range(num_heads):
            kv_head = h // group
            keys = torch.stack([k_cache[s, kv_head].double() for s in visible])  # [n, D]
            values = torch.stack([v_cache[s, kv_head].double() for s in visible])
            scores = torch.einsum("d,nd->n", q[i, h].double(), keys) / math.sqrt(head_dim)
            weights = torch.exp(scores - scores.max())
            weights = weights / weights.sum()
            out[i, h] = torch.einsum("n,nd->d", weights, values)
    return out.float()


def _case(name, q, k_cache, v_cache, slots, visible=False) -> Case:
    slots = torch.as_tensor(slots, dtype=torch.int64)
    args = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "slots": slots}
    return Case(name, args, model(q, k_cache, v_cache, slots), visible=visible, atol=TOL, rtol=TOL)


def _random(gen, name, q_len, kv_len, heads, kv_heads, head_dim, pool, scale=1.0) -> Case:
    q = torch.randn(q_len, heads, head_dim, generator=gen) * scale
    k_cache = torch.randn(pool, kv_heads, head_dim, generator=gen) * scale
    v_cache = torch.randn(pool, kv_heads, head_dim, generator=gen)
    slots = torch.randperm(pool, generator=gen)[:kv_len]
    return _case(name, q, k_cache, v_cache, slots)


def _paged(gen, name, q_len, kv_len, heads, kv_heads, head_dim, page_size, num_pages) -> Case:
    """Slots laid out the engine's way: whole pages, taken in a shuffled order."""
    pages = torch.randperm(num_pages, generator=gen)[: (kv_len + page_size - 1) // page_size]
    slots = (pages[:, None] * page_size + torch.arange(page_size)).flatten()[:kv_len]
    pool = num_pages * page_size
    q = torch.randn(q_len, heads, head_dim, generator=gen)
    k_cache = torch.randn(pool, kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(pool, kv_heads, head_dim, generator=gen)
    return _case(name, q, k_cache, v_cache, slots)


def example():
    q = torch.tensor([[[1.0, 0.0], [0.0, 2.0]],
                      [[0.0, 1.0], [1.0, 1.0]]])  # [q_len=2, Hq=2, D=2]
    k_cache = torch.tensor([[[0.0, 1.0]], [[9.0, 9.0]], [[1.0, 0.0]], [[1.0, 1.0]]])  # [4, 1, 2]
    v_cache = torch.tensor([[[0.0, 2.0]], [[9.0, 9.0]], [[2.0, 0.0]], [[4.0, 4.0]]])
    return q, k_cache, v_cache, [2, 0, 3]


def cases() -> list:
    gen = torch.Generator().manual_seed(601)
    q, k_cache, v_cache, slots = example()
    one = torch.tensor([[[0.5, -1.0, 2.0, 0.0]]])  # decode: one new token, one head
    k1 = torch.tensor([[[1.0, 0.0, 0.0, 1.0]], [[0.0, 1.0, 1.0, 0.0]], [[2.0, 2.0, 0.0, 0.0]]])
    v1 = torch.tensor([[[1.0, 2.0, 3.0, 4.0]], [[-1.0, 0.0, 1.0, 0.0]], [[0.0, 0.0, 5.0, 5.0]]])
    return [
        _case("示例 1：缓存前缀 1 个 token，GQA（2 个 query 头共用 1 个 KV 头）",
              q, k_cache, v_cache, slots, visible=True),
        _case("示例 2：decode，一个新 token 看到全部 3 个位置", one, k1, v1, [1, 2, 0],
              visible=True),
        _random(gen, "没有缓存前缀（整段 prefill），MHA", 7, 7, 4, 4, 16, 20),
        _random(gen, "decode，GQA 4:1", 1, 33, 8, 2, 32, 64),
        _random(gen, "前缀缓存一半，GQA 2:1", 12, 24, 4, 2, 8, 40),
        _random(gen, "MQA（只有 1 个 KV 头）", 5, 9, 6, 1, 16, 12),
        _random(gen, "数值较大（softmax 要减最大值）", 6, 10, 2, 2, 16, 16, scale=6.0),
        _paged(gen, "页大小 16 的页表，前缀 100 个 token", 28, 128, 9, 3, 64, 16, 20),
        _paged(gen, "页大小 4，decode", 1, 50, 16, 8, 64, 4, 30),
        _paged(gen, "页大小 1，长前缀", 3, 90, 4, 1, 32, 1, 120),
    ]
