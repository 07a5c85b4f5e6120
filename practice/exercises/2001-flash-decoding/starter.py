"""Exercise 2001: the loop of flash-decoding's split kernel (chapter 20's decode kernel): one
split's online softmax over its key blocks, for the GROUP query heads that share one KV head."""

import math
import os

# The cases are CPU tensors, which only Triton's interpreter can run. Triton reads this variable
# when it is first imported, so it is set before the import.
os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BLOCK_N = 16  # keys per loop step
MIN_DOT_ROWS = 16  # tl.dot wants tiles of at least 16 rows


@triton.jit
def split_kernel(q_ptr, k_cache_ptr, v_cache_ptr, page_table_ptr, table_idx_ptr, kv_lens_ptr,
                 partial_out_ptr, partial_lse_ptr, sm_scale, num_splits,
                 stride_qb, stride_qh, stride_ks, stride_kh, stride_pt,
                 stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
                 GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr,
                 BLOCK_N: tl.constexpr):
    b = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)

    # This split's keys: positions [start, end) of request b, whole blocks of BLOCK_N.
    kv_len = tl.load(kv_lens_ptr + b)
    split_len = tl.cdiv(tl.cdiv(kv_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * split_len
    end = tl.minimum(start + split_len, kv_len)
    if start >= end:
        return

    # The GROUP query heads that share this KV head, padded to GROUP_PAD rows: [GROUP_PAD, D].
    groups = tl.arange(0, GROUP_PAD)
    dims = tl.arange(0, HEAD_DIM)
    heads = kv_head * GROUP + groups
    q_mask = groups[:, None] < GROUP  # the padding rows are neither loaded nor stored
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + dims[None, :], mask=q_mask,
                other=0.0)
    row = tl.load(table_idx_ptr + b).to(tl.int64)  # request b's page-table row

    m_i = tl.full([GROUP_PAD], -1.0e30, dtype=tl.float32)  # running max of each row's scores
    l_i = tl.zeros([GROUP_PAD], dtype=tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([GROUP_PAD, HEAD_DIM], dtype=tl.float32)  # running sum of exp(...) * v

    # TODO: 按 BLOCK_N 个 key 一块，遍历这一段的位置 [start, end)：
    #   1. pos = 这一块的位置；超出 end 的位置要用掩码挡住（valid）
    #   2. 用页表把位置换成槽位：page_table[row, pos]（指针 page_table_ptr + row * stride_pt + pos）
    #   3. 从 k_cache / v_cache 读出这些槽位上第 kv_head 个 KV 头的 K、V：[BLOCK_N, HEAD_DIM]
    #      （槽位 s、KV 头 h、第 d 维的偏移是 s * stride_ks + h * stride_kh + d，v_cache 相同）
    #   4. 分数 scores = q · K^T * sm_scale：[GROUP_PAD, BLOCK_N]（tl.dot，input_precision="ieee"），
    #      无效的位置设为 -inf
    #   5. 在线 softmax：更新 m_i、l_i、acc（旧的 l_i 和 acc 要乘上 exp(m_i - m_new)）
    # 现在循环是空的：l_i 全是 0，下面的 acc / l_i 得到 NaN

    out = acc / l_i[:, None]
    tl.store(partial_out_ptr + b * stride_ob + heads[:, None] * stride_oh + split * stride_os
             + dims[None, :], out, mask=q_mask)
    tl.store(partial_lse_ptr + b * stride_lb + heads * stride_lh + split, m_i + tl.log(l_i),
             mask=groups < GROUP)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     page_table: torch.Tensor, table_idx: torch.Tensor, kv_lens: torch.Tensor,
                     num_splits: int) -> torch.Tensor:
    batch, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[1]
    group = num_heads // num_kv_heads
    partial_out = torch.zeros(batch, num_heads, num_splits, head_dim)
    partial_lse = torch.full((batch, num_heads, num_splits), float("-inf"))
    split_kernel[(batch, num_kv_heads, num_splits)](
        q, k_cache, v_cache, page_table, table_idx, kv_lens, partial_out, partial_lse,
        1.0 / math.sqrt(head_dim), num_splits,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), page_table.stride(0),
        partial_out.stride(0), partial_out.stride(1), partial_out.stride(2),
        partial_lse.stride(0), partial_lse.stride(1),
        GROUP=group, GROUP_PAD=max(MIN_DOT_ROWS, triton.next_power_of_2(group)),
        HEAD_DIM=head_dim, BLOCK_N=BLOCK_N,
    )
    # Merge the splits: weights exp(lse_s - max lse), normalised; an empty split (lse -inf) gets 0.
    weights = torch.softmax(partial_lse, dim=-1)
    return (weights[..., None] * partial_out).sum(dim=2)
