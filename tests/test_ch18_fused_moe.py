"""Chapter 18: the fused Triton MoE (routing, alignment, two grouped GEMMs) against plain torch.

On a CPU the kernels run under Triton's interpreter (minisgl.kernel.triton sets TRITON_INTERPRET),
so the shapes stay small. Routings are random, and some are built so that several experts get no
token at all, or all tokens pick the same experts. Every buffer the kernels fill starts as NaN (or
a poison integer), so a row a kernel forgets to write fails the comparison.
"""

from __future__ import annotations

import pytest
import torch

import minisgl.kernel.triton  # noqa: F401  (sets TRITON_INTERPRET before triton loads on a CPU)
from minisgl.kernel.triton import fused_moe as fm
from minisgl.moe import experts_torch, route
from minisgl.moe.align import align_pairs, max_padded_rows
from minisgl.ops.moe import fused_moe, resolve_backend

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
POISON_INT = -123456


@pytest.fixture(autouse=True)
def poisoned_scratch(monkeypatch):
    def poisoned(*shape, dtype, device):
        fill = float("nan") if dtype.is_floating_point else POISON_INT
        return torch.full(shape, fill, dtype=dtype, device=device)

    monkeypatch.setattr(fm, "_scratch", poisoned)


def random_routing(tokens: int, num_experts: int, top_k: int, seed: int,
                   allowed: list[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """topk_ids with k distinct experts per token, drawn from `allowed` (all by default), and
    positive weights."""
    gen = torch.Generator().manual_seed(seed)
    pool = torch.tensor(allowed if allowed is not None else range(num_experts))
    ids = torch.stack([pool[torch.randperm(len(pool), generator=gen)[:top_k]]
                       for _ in range(tokens)]).to(torch.int32)
    weights = torch.rand(tokens, top_k, generator=gen) + 0.1
    return weights.to(DEVICE), ids.to(DEVICE)


def random_experts(num_experts: int, hidden: int, inter: int, dtype: torch.dtype, seed: int):
    gen = torch.Generator().manual_seed(seed)
    w13 = torch.randn(num_experts, 2 * inter, hidden, generator=gen) / hidden**0.5
    w2 = torch.randn(num_experts, hidden, inter, generator=gen) / inter**0.5
    return w13.to(DEVICE, dtype), w2.to(DEVICE, dtype)


# --- routing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_experts,top_k,normalize", [(8, 2, True), (6, 3, False), (5, 1, True)])
def test_route_matches_torch(num_experts, top_k, normalize):
    logits = torch.randn(9, num_experts, generator=torch.Generator().manual_seed(num_experts))
    logits = (logits * 3).to(DEVICE)
    want_w, want_i = route(logits, top_k, normalize)
    got_w, got_i = fm.route_triton(logits, top_k, normalize)
    assert torch.equal(got_i, want_i)
    torch.testing.assert_close(got_w, want_w, rtol=1e-5, atol=1e-6)
    if normalize:
        torch.testing.assert_close(got_w.sum(-1), torch.ones(9, device=DEVICE))


def test_route_reads_bf16_logits_and_row_stride():
    wide = torch.randn(4, 20, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    logits = wide[:, :8].to(torch.bfloat16)[:, :8]  # contiguous bf16 copy
    strided = wide[:, :8]  # a view: row stride 20, not 8
    for x in (logits, strided):
        want_w, want_i = route(x, 2, True)
        got_w, got_i = fm.route_triton(x, 2, True)
        assert torch.equal(got_i, want_i)
        torch.testing.assert_close(got_w, want_w, rtol=1e-5, atol=1e-6)


# --- alignment -----------------------------------------------------------------------------------


def check_alignment(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> None:
    """align_pairs against a plain-Python statement of the layout, then the kernel against it."""
    ref = align_pairs(topk_ids, num_experts, block_m)
    flat = topk_ids.flatten().tolist()
    sentinel = len(flat)
    expected_rows, expected_blocks = [], []
    for e in range(num_experts):
        mine = [p for p, x in enumerate(flat) if x == e]
        if not mine:
            continue
        padded = -(-len(mine) // block_m) * block_m
        expected_rows += mine + [sentinel] * (padded - len(mine))
        expected_blocks += [e] * (padded // block_m)
    rows = max_padded_rows(len(flat), num_experts, block_m)
    assert len(expected_rows) <= rows and rows % block_m == 0
    assert ref.sorted_pairs.shape == (rows,) and ref.block_expert.shape == (rows // block_m,)
    assert ref.sorted_pairs[: len(expected_rows)].tolist() == expected_rows
    assert ref.block_expert.tolist() == expected_blocks + [-1] * (rows // block_m
                                                                  - len(expected_blocks))
    got = fm.align_triton(topk_ids, num_experts, block_m)
    used = len(expected_rows)  # rows past the used blocks are never read
    assert got.sorted_pairs[:used].tolist() == expected_rows
    assert torch.equal(got.block_expert, ref.block_expert)


@pytest.mark.parametrize("tokens,num_experts,top_k,block_m", [
    (1, 8, 2, 16), (7, 8, 2, 4), (40, 6, 3, 16), (300, 16, 2, 16),  # 300 * 2 pairs: 3 scan steps
])
def test_align_matches_reference(tokens, num_experts, top_k, block_m):
    _, ids = random_routing(tokens, num_experts, top_k, seed=tokens)
    check_alignment(ids, num_experts, block_m)


def test_align_with_idle_experts_and_one_crowded_expert():
    _, ids = random_routing(12, 16, 2, seed=3, allowed=[1, 5, 14])  # 13 experts idle
    check_alignment(ids, 16, 4)
    crowded = torch.full((20, 1), 7, dtype=torch.int32, device=DEVICE)  # every token to expert 7
    check_alignment(crowded, 8, 16)
    last = torch.full((3, 1), 7, dtype=torch.int32, device=DEVICE)  # only the last expert
    check_alignment(last, 8, 4)


# --- the grouped GEMMs ---------------------------------------------------------------------------


@pytest.mark.parametrize("tiles", [None, fm.MoETiles(block_m=16, block_n=16, block_k=16)],
                         ids=["default-tiles", "many-tiles"])
@pytest.mark.parametrize("allowed", [None, [0, 3, 6]], ids=["all-experts", "idle-experts"])
def test_experts_match_torch_fp32(tiles, allowed):
    hidden, inter, num_experts, top_k = 40, 24, 8, 2  # not multiples of the tiles: masked edges
    w13, w2 = random_experts(num_experts, hidden, inter, torch.float32, seed=1)
    x = torch.randn(11, hidden, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    weights, ids = random_routing(11, num_experts, top_k, seed=5, allowed=allowed)
    want = experts_torch(x, w13, w2, weights, ids)
    got = fm.experts_triton(x, w13, w2, weights, ids, tiles=tiles)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_prefill_tiles_for_many_pairs():
    num_experts, top_k = 4, 2
    tokens = 8 * num_experts // top_k + 3  # past choose_tiles' decode threshold
    tiles = fm.choose_tiles(tokens * top_k, num_experts, torch.float32)
    assert tiles.block_m == 64
    w13, w2 = random_experts(num_experts, 16, 16, torch.float32, seed=3)
    x = torch.randn(tokens, 16, generator=torch.Generator().manual_seed(4)).to(DEVICE)
    weights, ids = random_routing(tokens, num_experts, top_k, seed=6)
    torch.testing.assert_close(fm.experts_triton(x, w13, w2, weights, ids),
                               experts_torch(x, w13, w2, weights, ids), rtol=1e-5, atol=1e-5)


def test_fused_moe_backends_agree_and_reject_unknown():
    w13, w2 = random_experts(8, 32, 16, torch.float32, seed=7)
    gen = torch.Generator().manual_seed(8)
    x, logits = torch.randn(6, 32, generator=gen).to(DEVICE), torch.randn(6, 8, generator=gen)
    logits = logits.to(DEVICE)
    outs = [fused_moe(x, logits, w13, w2, 2, True, backend=b) for b in ("torch", "triton")]
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    assert resolve_backend("auto", x) == ("triton" if x.is_cuda else "torch")
    with pytest.raises(ValueError, match="unknown MoE backend"):
        fused_moe(x, logits, w13, w2, 2, True, backend="cutlass")


def test_no_tokens_gives_empty_output():
    w13, w2 = random_experts(4, 16, 8, torch.float32, seed=9)
    x = torch.empty(0, 16, device=DEVICE)
    logits = torch.empty(0, 4, device=DEVICE)
    assert fused_moe(x, logits, w13, w2, 2, True, backend="triton").shape == (0, 16)


# --- on the GPU: real Qwen3-30B-A3B expert shapes, bf16, and a CUDA graph -------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens", [1, 64, 700])
def test_gpu_real_shapes(dtype, tokens):
    w13, w2 = random_experts(128, 2048, 768, dtype, seed=10)
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, 2048, generator=gen).to(DEVICE, dtype)
    logits = torch.randn(tokens, 128, generator=gen).to(DEVICE, dtype)
    want = fused_moe(x.float(), logits, w13.float(), w2.float(), 8, True, backend="torch")
    got = fused_moe(x, logits, w13, w2, 8, True, backend="triton").float()
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    torch.testing.assert_close(got, want, rtol=tol, atol=tol * want.abs().max().item())


@pytest.mark.gpu
def test_gpu_cuda_graph_replays_new_routings():
    w13, w2 = random_experts(128, 256, 128, torch.bfloat16, seed=11)
    x = torch.randn(16, 256, device=DEVICE, dtype=torch.bfloat16)
    logits = torch.randn(16, 128, device=DEVICE, dtype=torch.bfloat16)
    fused_moe(x, logits, w13, w2, 8, True, backend="triton")  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fused_moe(x, logits, w13, w2, 8, True, backend="triton")
    for seed in range(3):
        torch.manual_seed(seed)
        x.copy_(torch.randn_like(x))
        logits.copy_(torch.randn_like(logits) * 4)
        graph.replay()
        want = fused_moe(x.float(), logits, w13.float(), w2.float(), 8, True, backend="torch")
        torch.testing.assert_close(out.float(), want, rtol=3e-2, atol=3e-2)
