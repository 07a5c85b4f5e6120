"""Cases of exercise 401. Expected values come from the row-by-row sort-based model below (float64
probabilities); random rows are drawn so that no cumulative sum lies within 1e-4 of top_p, so any
correct float32 implementation gives exactly the same kept set."""

import torch
from judgekit.case import Case

MARGIN = 1e-4


def model_row(row: torch.Tensor, k: int, p: float) -> torch.Tensor:
    vocab = row.numel()
    keep = torch.ones(vocab, dtype=torch.bool)
    if 0 < k < vocab:
        kth = torch.sort(row, descending=True).values[k - 1]
        keep = row >= kth
    if p < 1:
        probs = torch.softmax(torch.where(keep, row, float("-inf")).double(), dim=0)
        ordered = torch.sort(probs, descending=True).values
        total = 0.0
        for value in ordered.tolist():
            total += value
            if total >= p:
                break
        keep &= probs >= value
    return torch.where(keep, row, torch.full_like(row, float("-inf")))


def _case(name, logits, top_k, top_p, visible=False) -> Case:
    top_k = torch.tensor(top_k, dtype=torch.int64)
    top_p = torch.tensor(top_p, dtype=torch.float32)
    expected = torch.stack([model_row(logits[b], int(top_k[b]), float(top_p[b]))
                            for b in range(logits.shape[0])])
    return Case(name, {"logits": logits, "top_k": top_k, "top_p": top_p}, expected, visible=visible)


def _safe_p(gen, row: torch.Tensor, k: int) -> float:
    """A top_p whose cut is at least MARGIN away from every cumulative sum of the row."""
    vocab = row.numel()
    keep = torch.ones(vocab, dtype=torch.bool)
    if 0 < k < vocab:
        keep = row >= torch.sort(row, descending=True).values[k - 1]
    probs = torch.softmax(torch.where(keep, row, float("-inf")).double(), dim=0)
    cumulative = torch.sort(probs, descending=True).values.cumsum(0)
    for _ in range(1000):
        p = 0.3 + 0.65 * float(torch.rand((), generator=gen))
        if float((cumulative - p).abs().min()) > MARGIN:
            return p
    raise RuntimeError("no safe top_p")


def _random(gen, name, batch, vocab, scale=2.0) -> Case:
    logits = torch.randn(batch, vocab, generator=gen) * scale
    top_k, top_p = [], []
    for b in range(batch):
        mode = b % 4
        k = int(torch.randint(1, min(vocab, 200), (), generator=gen)) if mode in (0, 2) else 0
        if mode == 3:
            k = -1
        p = _safe_p(gen, logits[b], k) if mode in (1, 2) else 1.0
        top_k.append(k)
        top_p.append(p)
    return _case(name, logits, top_k, top_p)


def cases() -> list:
    gen = torch.Generator().manual_seed(401)
    example = torch.tensor([[1.0, 4.0, 2.0, 3.0, 0.0], [1.0, 4.0, 2.0, 3.0, 0.0],
                            [3.0, 1.0, 3.0, 0.0, 2.0]])
    ties = torch.tensor([[1.0, 4.0, 4.0, 4.0, 0.0, -1.0], [5.0, 5.0, 2.0, 2.0, 2.0, 0.0]])
    return [
        _case("示例 1：top-k、top-p 与并列", example, [2, 0, 1], [1.0, 0.9, 1.0], visible=True),
        _case("示例 2：都关闭", example, [0, -1, 5], [1.0, 1.0, 1.0], visible=True),
        _case("并列的 top-k 边界全部保留", ties, [2, 3], [1.0, 1.0]),
        _case("top-p 很小：只剩最大的（及其并列）", ties, [0, 0], [0.05, 0.05]),
        _case("top-p 边界上的并列", ties, [0, 0], [0.5, 0.94]),
        _random(gen, "随机：8 × 1000", 8, 1000),
        _random(gen, "随机：16 × 4096，平缓的分布", 16, 4096, scale=1.0),
        _random(gen, "随机：32 × 512，尖锐的分布", 32, 512, scale=5.0),
        _random(gen, "随机：3 × 50", 3, 50),
    ]
