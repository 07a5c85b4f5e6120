"""Cases of exercise 2601. Expected values come from the model below, which quantizes one row at
a time with Python's max over the row and multiplies in float64 before rounding the sum to
float32 (the learner sums in float32: y is compared within a tolerance, q and scale exactly)."""

import torch
from judgekit.case import Case


def model(x, w, bits):
    if not 2 <= bits <= 8 or w.dim() != 2 or not w.is_floating_point() \
            or x.shape[-1] != w.shape[1]:
        return "ValueError"
    qmax = 2 ** (bits - 1) - 1
    rows, scales = [], []
    for row in w.float():
        top = max(abs(v) for v in row.tolist())
        scale = torch.tensor(top, dtype=torch.float32) / qmax if top > 0 else torch.tensor(1.0)
        scales.append(scale)
        rows.append(torch.round(row / scale).clamp(-qmax, qmax).to(torch.int8))
    q, scale = torch.stack(rows), torch.stack(scales)
    y = ((x.double() @ q.double().T) * scale.double()).float()
    return {"q": q, "scale": scale, "y": y}


def _case(name, x, w, bits=8, visible=False) -> Case:
    expected = model(x, w, bits)
    args = {"x": x, "w": w, "bits": bits}
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible, atol=1e-4, rtol=1e-5)


def cases() -> list:
    gen = torch.Generator().manual_seed(2601)

    def randn(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen) * scale

    outlier = randn(6, 40)
    outlier[2] *= 100  # one row of large weights: the others keep their own scale
    zero_row = randn(5, 16)
    zero_row[3] = 0
    ties = torch.tensor([[1.0, 0.5, -0.25, 0.75], [2.0, -1.0, 0.0, 3.0]])  # w / scale on .5
    return [
        _case("示例", torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -1.0], [0.1, 0.2]]),
              visible=True),
        _case("一行特别大的权重", randn(3, 40), outlier),
        _case("全零的一行：scale 是 1", randn(2, 16), zero_row),
        _case("恰好落在 .5 上：四舍六入五成双", randn(1, 4), ties, bits=3),
        _case("4 位", randn(4, 64), randn(32, 64, scale=0.02), bits=4),
        _case("2 位：只有 -1、0、1", randn(2, 8), randn(8, 8), bits=2),
        _case("bfloat16 权重", randn(3, 96), randn(48, 96).bfloat16()),
        _case("三维的 x", randn(2, 3, 32), randn(16, 32)),
        _case("SmolLM2 的形状", randn(1, 576, scale=2.0), randn(192, 576, scale=0.05)),
        _case("bits = 9", randn(1, 4), randn(2, 4), bits=9),
        _case("bits = 1", randn(1, 4), randn(2, 4), bits=1),
        _case("w 是一维", randn(1, 4), randn(4)),
        _case("w 是整数", randn(1, 4), torch.ones(2, 4, dtype=torch.int64)),
        _case("K 对不上", randn(1, 5), randn(2, 4)),
    ]
