"""Cases of exercise 201. Expected values come from torch.nn.functional.rms_norm in float32."""

import torch
import torch.nn.functional as F
from judgekit.case import Case

TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


def _case(name, x, weight, eps, residual=None, visible=False) -> Case:
    dtype = x.dtype
    h = x.float() if residual is None else x.float() + residual.float()
    out = F.rms_norm(h, (h.shape[-1],), weight.float(), eps).to(dtype)
    args = {"x": x, "weight": weight, "eps": eps}
    expected = out
    if residual is not None:
        args["residual"] = residual
        expected = (out, h.to(dtype))
    tol = TOLERANCE[dtype]
    return Case(name, args, expected, visible=visible, atol=tol, rtol=tol)


def _random(gen, shape, dtype, scale=1.0, residual=False, eps=1e-6, name=""):
    x = (torch.randn(shape, generator=gen) * scale).to(dtype)
    weight = (1 + 0.2 * torch.randn(shape[-1], generator=gen)).to(dtype)
    res = (torch.randn(shape, generator=gen) * scale).to(dtype) if residual else None
    return _case(name, x, weight, eps, res)


def cases() -> list:
    gen = torch.Generator().manual_seed(201)
    return [
        _case("示例 1：没有残差", torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.ones(4), 1e-6,
              visible=True),
        _case("示例 2：有残差", torch.tensor([[1.0, 1.0, 1.0, 1.0]]),
              torch.tensor([1.0, 1.0, 0.5, 2.0]), 1e-6,
              residual=torch.tensor([[1.0, -1.0, 3.0, -3.0]]), visible=True),
        _random(gen, (4, 64), torch.float32, name="float32，[4, 64]"),
        _random(gen, (2, 3, 128), torch.float32, residual=True, name="float32，三维输入，有残差"),
        _random(gen, (8, 576), torch.bfloat16, name="bfloat16，H = 576"),
        _random(gen, (5, 1024), torch.bfloat16, residual=True, name="bfloat16，有残差"),
        _random(gen, (4, 512), torch.float16, scale=300.0, residual=True,
                name="float16，数值很大（平方会溢出 float16）"),
        _random(gen, (3, 256), torch.float32, scale=1e-3, eps=1e-5,
                name="float32，数值很小（eps 起作用）"),
        _random(gen, (2, 7, 96), torch.bfloat16, residual=True, eps=1e-5, name="bfloat16，[2, 7, 96]"),
    ]
