"""Cases of exercise 2301. Expected values come from the model below, which counts each weight
matrix of a layer separately and compares the bound with fractions.Fraction."""

import random
from fractions import Fraction

from judgekit.case import Case

QWEN3 = {"hidden_size": 1024, "intermediate_size": 3072, "num_layers": 28, "num_qo_heads": 16,
         "num_kv_heads": 8, "head_dim": 128, "vocab_size": 151936}
SMOL = {"hidden_size": 576, "intermediate_size": 1536, "num_layers": 30, "num_qo_heads": 9,
        "num_kv_heads": 3, "head_dim": 64, "vocab_size": 49152}
H200 = (4_800_000_000_000, 989_000_000_000_000)


def model(cfg, batch, context, dtype_bytes, bytes_per_s, flops_per_s):
    if min(batch, dtype_bytes, bytes_per_s, flops_per_s) < 1 or context < 0:
        return "ValueError"
    h, i, d = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, k, v = cfg["num_qo_heads"] * d * h, cfg["num_kv_heads"] * d * h, cfg["num_kv_heads"] * d * h
    o, gate, up, down = cfg["num_qo_heads"] * d * h, h * i, h * i, i * h
    params = cfg["num_layers"] * (q + k + v + o + gate + up + down) + cfg["vocab_size"] * h
    kv_per_token = 2 * cfg["num_layers"] * cfg["num_kv_heads"] * d * dtype_bytes
    step_bytes = params * dtype_bytes + batch * context * kv_per_token
    attn = 4 * cfg["num_layers"] * cfg["num_qo_heads"] * d * context
    step_flops = batch * 2 * params + batch * attn
    intensity = Fraction(step_flops, step_bytes)
    bound = "memory" if intensity < Fraction(flops_per_s, bytes_per_s) else "compute"
    return {"params": params, "step_bytes": step_bytes, "step_flops": step_flops, "bound": bound}


def _case(name, cfg, batch, context, dtype_bytes, hw, visible=False) -> Case:
    args = {"cfg": cfg, "batch": batch, "context": context, "dtype_bytes": dtype_bytes,
            "bytes_per_s": hw[0], "flops_per_s": hw[1]}
    expected = model(cfg, batch, context, dtype_bytes, *hw)
    if expected == "ValueError":
        return Case(name, args, raises="ValueError", visible=visible)
    return Case(name, args, expected, visible=visible)


def cases() -> list:
    rng = random.Random()
    out = [
        _case("示例：Qwen3-0.6B 批 1", QWEN3, 1, 1024, 2, H200, visible=True),
        _case("Qwen3-0.6B 批 256", QWEN3, 256, 1024, 2, H200),
        _case("SmolLM2 fp32 批 8", SMOL, 8, 300, 4, H200),
        _case("上下文 0", QWEN3, 4, 0, 2, H200),
        _case("大批、无上下文：算力瓶颈", QWEN3, 4096, 0, 2, H200),
        _case("带宽极高：算力瓶颈", SMOL, 1, 10, 2, (10**18, 10**9)),
        _case("批为 0", QWEN3, 0, 10, 2, H200),
        _case("上下文为负", QWEN3, 1, -1, 2, H200),
        _case("dtype 0 字节", QWEN3, 1, 1, 0, H200),
        _case("带宽为 0", QWEN3, 1, 1, 2, (0, 10**12)),
    ]
    for n in range(6):
        cfg = {"hidden_size": rng.choice([64, 576, 1024, 4096]),
               "intermediate_size": rng.choice([128, 1536, 3072, 14336]),
               "num_layers": rng.randint(1, 80), "num_qo_heads": rng.choice([4, 9, 16, 32]),
               "num_kv_heads": rng.choice([1, 2, 8]), "head_dim": rng.choice([32, 64, 128]),
               "vocab_size": rng.randint(1000, 200000)}
        out.append(_case(f"随机 {n + 1}", cfg, rng.randint(1, 2048), rng.randint(0, 32768),
                         rng.choice([1, 2, 4]), (rng.randint(10**11, 10**13),
                                                 rng.randint(10**13, 10**16))))
    return out
