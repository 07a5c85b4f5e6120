"""Cases of exercise 2001. Expected values come from dense attention in float64: each request's
keys and values gathered through its page-table row, a plain softmax over all of them (no
splits, no online softmax, no Triton). Layouts are random: shuffled pages, shuffled page-table
rows, and table entries past a request's length that point at other requests' slots, so reading
past the end or ignoring the page table gives a wrong answer, not a crash."""

import torch
from judgekit.case import Case

TOL = 1e-4


def model(q, k_cache, v_cache, page_table, table_idx, kv_lens) -> torch.Tensor:
    group = q.shape[1] // k_cache.shape[1]
    out = torch.empty(q.shape, dtype=torch.float64)
    for b in range(q.shape[0]):
        slots = page_table[int(table_idx[b]), : int(kv_lens[b])].long()
        k = k_cache[slots].double().repeat_interleave(group, dim=1)  # [n, H, D]
        v = v_cache[slots].double().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", q[b].double(), k) / q.shape[2] ** 0.5
        out[b] = torch.einsum("hn,nhd->hd", scores.softmax(dim=-1), v)
    return out.float()


def _case(gen, name, lens, num_splits, page_size, group, num_kv_heads=1, head_dim=16, scale=1.0,
          visible=False) -> Case:
    pages = [-(-n // page_size) for n in lens]
    num_pages = sum(pages) + 2  # two pages nobody owns
    num_slots = num_pages * page_size
    order = torch.randperm(num_pages, generator=gen)
    rows = torch.randperm(len(lens) + 1, generator=gen)[: len(lens)]  # one row nobody uses
    width = max(lens) + 8
    page_table = torch.randint(0, num_slots, (len(lens) + 1, width), generator=gen,
                               dtype=torch.int32)
    used = 0
    for row, n, count in zip(rows.tolist(), lens, pages):
        own = order[used : used + count]
        used += count
        page_table[row, :n] = (own[:, None] * page_size + torch.arange(page_size)).flatten()[:n]
    k_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen) * scale
    v_cache = torch.randn(num_slots, num_kv_heads, head_dim, generator=gen)
    q = torch.randn(len(lens), num_kv_heads * group, head_dim, generator=gen) * scale
    args = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "page_table": page_table,
            "table_idx": rows.int(), "kv_lens": torch.tensor(lens, dtype=torch.int32),
            "num_splits": num_splits}
    expected = model(q, k_cache, v_cache, page_table, rows, torch.tensor(lens))
    return Case(name, args, expected, visible=visible, atol=TOL, rtol=TOL)


def cases() -> list:
    gen = torch.Generator().manual_seed(2001)
    return [
        _case(gen, "示例 1：2 个请求（5、40 个 token），2 段，2 个 query 头共用 1 个 KV 头，页大小 4",
              [5, 40], 2, 4, 2, visible=True),
        _case(gen, "示例 2：1 个请求 100 个 token，4 段，GQA 4:1", [100], 4, 8, 4, visible=True),
        _case(gen, "不分段（1 段），3 个请求，MHA（每个 KV 头 1 个 query 头）", [17, 64, 33], 1,
              16, 1, num_kv_heads=4),
        _case(gen, "段数多于 key 块数（8 段，最长 48 个 token = 3 块）", [48, 3], 8, 4, 2),
        _case(gen, "页大小 1，GQA 8:1，head_dim 32", [70, 16, 1], 3, 1, 8, head_dim=32),
        _case(gen, "长度正好是块长的倍数、多 1、少 1", [32, 33, 31], 2, 16, 2, num_kv_heads=2),
        _case(gen, "数值很大（不减最大值会溢出）", [60, 9], 2, 4, 4, scale=6.0),
        _case(gen, "4 个请求，段数 5，GQA 2:1，2 个 KV 头", [90, 1, 45, 77], 5, 8, 2,
              num_kv_heads=2),
    ]
