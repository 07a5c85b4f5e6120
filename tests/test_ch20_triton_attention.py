"""Chapter 20: the Triton paged-attention kernels against dense attention in plain torch.

On a CPU the kernels run under Triton's interpreter (minisgl.kernel.triton sets TRITON_INTERPRET),
so the shapes stay small. Every layout is random: requests get shuffled pages of the pool and
shuffled page-table rows, and the page-table entries past each request's length point at real
(wrong) slots, so a kernel reading past the end gives a wrong answer instead of a crash. Outputs
start as NaN, so a row the kernel forgets to write fails the comparison.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest
import torch

from minisgl.kernel.triton import DecodeWorkspace, decode_attention, extend_attention
from minisgl.kernel.triton.extend_attention import ExtendConfig, heads_per_program

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
MAX_SEQ_LEN = 320


@dataclass
class PagedKV:
    k_cache: torch.Tensor  # [slots, H_kv, D]
    v_cache: torch.Tensor
    page_table: torch.Tensor  # [rows, MAX_SEQ_LEN] int32
    table_idx: torch.Tensor  # [B] int32: each request's page-table row
    kv_lens: torch.Tensor  # [B] int32


def paged_kv(kv_lens: list[int], page_size: int, num_kv_heads: int, head_dim: int,
             dtype: torch.dtype, gen: torch.Generator) -> PagedKV:
    pages_per_req = [-(-n // page_size) for n in kv_lens]
    num_pages = sum(pages_per_req) + 2  # two pages nobody owns
    page_order = torch.randperm(num_pages, generator=gen)
    num_rows = len(kv_lens) + 2
    num_slots = num_pages * page_size
    page_table = torch.randint(0, num_slots, (num_rows, MAX_SEQ_LEN), generator=gen,
                               dtype=torch.int32)
    rows = torch.randperm(num_rows, generator=gen)[: len(kv_lens)]
    used = 0
    for row, n, pages in zip(rows.tolist(), kv_lens, pages_per_req):
        owned = page_order[used : used + pages]
        used += pages
        slots = (owned[:, None] * page_size + torch.arange(page_size)).flatten()[:n]
        page_table[row, :n] = slots.int()

    def cache():
        return torch.randn(num_slots, num_kv_heads, head_dim, generator=gen).to(dtype)

    return PagedKV(cache().to(DEVICE), cache().to(DEVICE), page_table.to(DEVICE),
                   rows.int().to(DEVICE), torch.tensor(kv_lens, dtype=torch.int32, device=DEVICE))


def dense_attention(q: torch.Tensor, kv: PagedKV, b: int, q_positions: torch.Tensor,
                    sm_scale: float) -> torch.Tensor:
    """q: [n, H, D] of request b at absolute positions q_positions; float64 softmax, explicit
    causal mask over the request's keys gathered through the page table."""
    n = int(kv.kv_lens[b])
    slots = kv.page_table[kv.table_idx[b], :n].long()
    groups = q.shape[1] // kv.k_cache.shape[1]
    k = kv.k_cache[slots].double().repeat_interleave(groups, 1)  # [n, H, D]
    v = kv.v_cache[slots].double().repeat_interleave(groups, 1)
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) * sm_scale
    visible = torch.arange(n, device=q.device)[None, :] <= q_positions[:, None]
    scores = scores.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def random_lens(gen: torch.Generator, count: int) -> list[int]:
    """Lengths in 1..300, always including both ends."""
    return [1, 300] + torch.randint(1, 301, (count - 2,), generator=gen).tolist()


def check_decode(out: torch.Tensor, q: torch.Tensor, kv: PagedKV, sm_scale: float, tol: float):
    for b in range(q.shape[0]):
        last = kv.kv_lens[b:b + 1].long() - 1
        expected = dense_attention(q[b:b + 1], kv, b, last, sm_scale)[0]
        torch.testing.assert_close(out[b].double(), expected, rtol=tol, atol=tol)


# (page size, GQA ratio): every page size and every ratio at least once
LAYOUTS = [(1, 8), (16, 1), (16, 2), (256, 2), (256, 8), (1, 1)]


@pytest.mark.parametrize("page_size,group", LAYOUTS)
def test_decode_equals_dense(page_size, group):
    gen = torch.Generator().manual_seed(page_size * 10 + group)
    num_kv_heads, head_dim = (1 if group == 8 else 2), 16
    lens = random_lens(gen, 5)
    kv = paged_kv(lens, page_size, num_kv_heads, head_dim, torch.float32, gen)
    q = torch.randn(len(lens), num_kv_heads * group, head_dim, generator=gen).to(DEVICE)
    # 1 split; a few; more splits than the 64-key blocks of any request (300 keys: 5 blocks)
    for num_splits in (1, 3, 8):
        out = torch.full_like(q, float("nan"))
        decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                         num_splits=num_splits, out=out)
        check_decode(out, q, kv, head_dim ** -0.5, 1e-5)


def test_decode_head_dim_32_and_scale():
    gen = torch.Generator().manual_seed(7)
    kv = paged_kv(random_lens(gen, 3), 16, 2, 32, torch.float32, gen)
    q = torch.randn(3, 4, 32, generator=gen).to(DEVICE)
    out = decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                           num_splits=2, sm_scale=0.3)
    check_decode(out, q, kv, 0.3, 1e-5)


def test_decode_reuses_workspace_while_lengths_change():
    """As in a replayed CUDA graph: the same buffers, grid and split count; only the lengths in
    device memory change between calls. A length-0 row (batch padding) comes out as zeros."""
    gen = torch.Generator().manual_seed(11)
    kv = paged_kv([300, 300, 300, 300], 16, 2, 16, torch.float32, gen)
    q = torch.randn(4, 4, 16, generator=gen).to(DEVICE)
    workspace = DecodeWorkspace.allocate(8, 4, 16, DEVICE, max_splits=4)
    out = torch.full_like(q, float("nan"))
    for lens in ([300, 1, 64, 65], [2, 299, 128, 0], [300, 300, 3, 200]):
        kv.kv_lens.copy_(torch.tensor(lens))
        decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                         num_splits=4, workspace=workspace, out=out)
        real = [b for b, n in enumerate(lens) if n > 0]
        for b in real:
            last = kv.kv_lens[b:b + 1].long() - 1
            expected = dense_attention(q[b:b + 1], kv, b, last, 0.25)[0]
            torch.testing.assert_close(out[b].double(), expected, rtol=1e-5, atol=1e-5)
        assert out[[b for b in range(4) if b not in real]].eq(0).all()


@pytest.mark.parametrize("page_size,group,num_splits", [(1, 8, 1), (16, 2, 3), (256, 1, 8)])
def test_decode_that_stores_the_new_kv_equals_store_then_decode(page_size, group, num_splits):
    """new_kv: the decode kernel writes this step's K/V at out_loc itself. Against store_cache
    followed by the plain kernel: the same outputs bit for bit and the same pool, from a pool whose
    new slots are poisoned with NaN (a read before the write would show). A length-0 row (batch
    padding) writes nothing: its scratch slot keeps its poison."""
    from minisgl.kernel.torch_ops import store_cache

    gen = torch.Generator().manual_seed(page_size + group + num_splits)
    num_kv_heads, head_dim = (1 if group == 8 else 2), 16
    lens = random_lens(gen, 5) + [0]
    kv = paged_kv(lens, page_size, num_kv_heads, head_dim, torch.float32, gen)
    batch = len(lens)
    q = torch.randn(batch, num_kv_heads * group, head_dim, generator=gen).to(DEVICE)
    # k and v as the engine passes them: views into one wider row per token
    qkv = torch.randn(batch, 3, num_kv_heads, head_dim, generator=gen).to(DEVICE)
    k, v = qkv[:, 1], qkv[:, 2]
    rows = kv.table_idx.long()
    owned = torch.cat([kv.page_table[rows[b], :n] for b, n in enumerate(lens)]).long()
    free = torch.ones(kv.k_cache.shape[0], dtype=torch.bool, device=DEVICE)
    free[owned] = False
    scratch = free.nonzero()[0, 0]  # a slot no request reads, as the engine's scratch slot
    out_loc = torch.stack([kv.page_table[rows[b], n - 1] if n else scratch
                           for b, n in enumerate(lens)]).int()
    real = torch.tensor([n > 0 for n in lens], device=DEVICE)
    k_before, v_before = kv.k_cache.clone(), kv.v_cache.clone()
    store_cache(kv.k_cache, kv.v_cache, out_loc[real], k[real], v[real])
    expected = decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx,
                                kv.kv_lens, num_splits=num_splits)
    k_after, v_after = kv.k_cache.clone(), kv.v_cache.clone()
    for cache, before in ((kv.k_cache, k_before), (kv.v_cache, v_before)):
        cache.copy_(before)
        cache[out_loc.long()] = float("nan")
    k_after[scratch] = v_after[scratch] = float("nan")  # the padding row's slot: not written
    out = torch.full_like(q, float("nan"))
    decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                     num_splits=num_splits, out=out, new_kv=(k, v, out_loc))
    assert torch.equal(out, expected)
    for cache, after in ((kv.k_cache, k_after), (kv.v_cache, v_after)):
        assert torch.equal(cache.isnan(), after.isnan())  # the scratch slot's NaN only
        assert torch.equal(cache.nan_to_num(7.0), after.nan_to_num(7.0))


def test_decode_refuses_new_kv_it_cannot_store():
    gen = torch.Generator().manual_seed(5)
    kv = paged_kv([4, 9], 1, 2, 16, torch.float32, gen)
    q = torch.randn(2, 4, 16, generator=gen).to(DEVICE)
    k = torch.randn(2, 2, 16, generator=gen).to(DEVICE)
    slots = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    pool = kv.k_cache.clone(), kv.v_cache.clone()
    for new_kv in [(k[:1], k[:1], slots),  # one row for two requests
                   (k, k.transpose(1, 2).contiguous().transpose(1, 2), slots),  # D strided
                   (k, k, slots.float()),  # float slots
                   (k, k, slots[:1]),  # one slot for two requests
                   (k, torch.randn(2, 2, 8).to(DEVICE), slots)]:  # wrong head_dim
        with pytest.raises(ValueError, match="new_kv"):
            decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                             num_splits=2, new_kv=new_kv)
    assert torch.equal(kv.k_cache, pool[0]) and torch.equal(kv.v_cache, pool[1])


def test_decode_rejects_a_small_workspace():
    gen = torch.Generator().manual_seed(5)
    kv = paged_kv([10, 20], 1, 1, 16, torch.float32, gen)
    q = torch.randn(2, 2, 16, generator=gen).to(DEVICE)
    small = DecodeWorkspace.allocate(2, 2, 16, DEVICE, max_splits=2)
    with pytest.raises(ValueError, match="splits"):
        decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                         num_splits=4, workspace=small)


def run_extend(q_lens: list[int], prefixes: list[int], page_size: int, group: int,
               head_dim: int, dtype: torch.dtype, tol: float, seed: int,
               config: ExtendConfig | None = None) -> None:
    gen = torch.Generator().manual_seed(seed)
    num_kv_heads = 1 if group >= 8 else 2
    kv_lens = [c + n for c, n in zip(prefixes, q_lens)]
    kv = paged_kv(kv_lens, page_size, num_kv_heads, head_dim, dtype, gen)
    q = torch.randn(sum(q_lens), num_kv_heads * group, head_dim, generator=gen).to(dtype)
    q = q.to(DEVICE)
    cu_q_lens = torch.tensor([0, *q_lens], device=DEVICE).cumsum(0).int()
    out = torch.full_like(q, float("nan"))
    extend_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, cu_q_lens,
                     kv.kv_lens, max(q_lens), out=out, config=config)
    for b, (cached, n) in enumerate(zip(prefixes, q_lens)):
        rows = slice(int(cu_q_lens[b]), int(cu_q_lens[b + 1]))
        positions = torch.arange(cached, cached + n, device=DEVICE)
        expected = dense_attention(q[rows], kv, b, positions, head_dim ** -0.5)
        torch.testing.assert_close(out[rows].double(), expected, rtol=tol, atol=tol)


# (new tokens, cached prefix) per request: no prefix, a prefix hit of various sizes, q_len 1,
# and query blocks that end mid-request (q_len past one 64-row block)
EXTEND_REQS = [(37, 0), (1, 120), (1, 0), (130, 64), (50, 250), (70, 3)]


@pytest.mark.parametrize("page_size,group", LAYOUTS)
def test_extend_equals_dense(page_size, group):
    q_lens, prefixes = zip(*EXTEND_REQS)
    run_extend(list(q_lens), list(prefixes), page_size, group, 16, torch.float32, 1e-5,
               seed=page_size * 10 + group)


# Small tiles, so that one request spans many tiles and key blocks: the unmasked loop (key blocks
# before a tile's first token), the diagonal blocks, tiles of 4 to 32 tokens, GQA groups packed
# 1, 2 or 4 heads to a tile (group 3 cannot pack: it is not a power of two).
@pytest.mark.parametrize("block_m,block_n,group", [(32, 16, 2), (16, 32, 4), (64, 16, 3),
                                                   (16, 16, 8)])
def test_extend_tilings(block_m, block_n, group):
    config = ExtendConfig(block_m=block_m, block_n=block_n, num_warps=4)
    # prefix 14: a tile starting 2 keys before the end of a key block (its last key is not
    # visible to the tile's first row), the boundary of the unmasked loop
    run_extend([45, 1, 17, 80], [0, 14, 29, 47], 4, group, 16, torch.float32, 1e-5,
               seed=block_m + block_n + group, config=config)


def test_heads_per_program():
    # the largest power of two dividing the group, leaving at least 8 tokens per tile
    assert [heads_per_program(g, 128) for g in (1, 2, 3, 4, 6, 8, 16, 32)] == \
        [1, 2, 1, 4, 2, 8, 16, 16]
    assert heads_per_program(8, 16) == 2 and heads_per_program(2, 8) == 1


def test_extend_random_batch_head_dim_32():
    gen = torch.Generator().manual_seed(3)
    q_lens = torch.randint(1, 100, (4,), generator=gen).tolist()
    prefixes = torch.randint(0, 200, (4,), generator=gen).tolist()
    run_extend(q_lens, prefixes, 16, 2, 32, torch.float32, 1e-5, seed=4)


def test_half_precision_inputs():
    """fp16 in, fp16 out, fp32 softmax inside: within fp16 rounding of the float64 result."""
    run_extend([40, 1], [30, 90], 16, 2, 16, torch.float16, 2e-3, seed=8)
    gen = torch.Generator().manual_seed(9)
    kv = paged_kv([90, 5], 16, 2, 16, torch.float16, gen)
    q = torch.randn(2, 4, 16, generator=gen).half().to(DEVICE)
    out = decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx, kv.kv_lens,
                           num_splits=2)
    assert out.dtype == torch.float16
    check_decode(out, q, kv, 0.25, 2e-3)


@pytest.mark.gpu
def test_bfloat16_inputs_on_gpu():
    """bf16 runs only compiled: the interpreter's tl.dot multiplies bf16 bit patterns as integers
    (it keeps bf16 as uint16 arrays), so under TRITON_INTERPRET bf16 results are meaningless."""
    run_extend([40, 1, 200], [30, 90, 0], 16, 2, 128, torch.bfloat16, 2e-2, seed=12)
    gen = torch.Generator().manual_seed(13)
    kv = paged_kv([300, 5, 77], 16, 8, 128, torch.bfloat16, gen)
    q = torch.randn(3, 16, 128, generator=gen).bfloat16().to(DEVICE)
    for num_splits in (1, 4):
        out = decode_attention(q, kv.k_cache, kv.v_cache, kv.page_table, kv.table_idx,
                               kv.kv_lens, num_splits=num_splits)
        check_decode(out, q, kv, 128 ** -0.5, 2e-2)


def test_triton_imported_too_early_is_a_clear_error():
    """Triton's own library functions take the interpreter setting when triton is first imported;
    on a CPU, importing our kernels after something else imported triton must say so plainly."""
    code = "import torch._dynamo, triton, minisgl.kernel.triton"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                            timeout=300)
    if torch.cuda.is_available():
        assert result.returncode == 0, result.stderr
    else:
        assert "triton was imported before TRITON_INTERPRET=1 was set" in result.stderr
