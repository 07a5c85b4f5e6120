"""The roofline of decode (chapter 23): bytes and FLOPs per generated token against a GPU's
limits, from nothing but the model's config.

One decode step of a batch of B requests reads every weight once (shared by the B tokens) and
each request's own K/V (its context of L tokens). Per generated token that is

    bytes = weight_bytes / B + kv_bytes_per_context_token * L
    FLOPs = 2 * linear_params + 4 * layers * qo_heads * head_dim * L     (QK^T and PV)

and the hardware bounds the aggregate rate at min(peak_flops / FLOPs, bandwidth / bytes) tokens
per second. At small B the weights dominate the bytes: decode is bandwidth-bound, and batching is
what buys throughput. Dense models only (a MoE layer reads the experts its tokens route to).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minisgl.models.config import ModelConfig


@dataclass(frozen=True)
class Hardware:
    name: str
    bytes_per_s: float  # memory bandwidth
    flops_per_s: float  # dense 16-bit tensor-core peak

    @property
    def ridge(self) -> float:
        """FLOPs per byte above which a kernel is compute-bound."""
        return self.flops_per_s / self.bytes_per_s


H200 = Hardware("H200", 4.8e12, 989e12)  # HBM3e 4.8 TB/s; bf16 dense 989 TFLOP/s


@dataclass(frozen=True)
class DecodeCost:
    batch: int
    context: int
    bytes_per_token: float
    flops_per_token: float

    @property
    def intensity(self) -> float:
        return self.flops_per_token / self.bytes_per_token

    def bound_tokens_per_s(self, hw: Hardware) -> float:
        return min(hw.flops_per_s / self.flops_per_token, hw.bytes_per_s / self.bytes_per_token)

    def bound_step_ms(self, hw: Hardware) -> float:
        """The shortest possible decode step of the whole batch."""
        return self.batch / self.bound_tokens_per_s(hw) * 1e3


def linear_params(cfg: ModelConfig) -> int:
    """Weights every token multiplies by: the layers' projections and the LM head."""
    h, d = cfg.hidden_size, cfg.head_dim
    attn = h * (cfg.num_qo_heads + 2 * cfg.num_kv_heads) * d + cfg.num_qo_heads * d * h
    mlp = 3 * h * cfg.intermediate_size  # gate, up, down
    return cfg.num_layers * (attn + mlp) + cfg.vocab_size * h


def kv_bytes_per_token(cfg: ModelConfig, dtype_bytes: int = 2) -> int:
    """K and V of one context token in every layer."""
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * dtype_bytes


def decode_cost(cfg: ModelConfig, batch: int, context: int, dtype_bytes: int = 2) -> DecodeCost:
    if batch < 1 or context < 0:
        raise ValueError(f"batch must be >= 1 and context >= 0 (got {batch}, {context})")
    if cfg.moe is not None:
        raise ValueError("decode_cost covers dense models only")
    params = linear_params(cfg)
    bytes_ = params * dtype_bytes / batch + kv_bytes_per_token(cfg, dtype_bytes) * context
    flops = 2 * params + 4 * cfg.num_layers * cfg.num_qo_heads * cfg.head_dim * context
    return DecodeCost(batch, context, bytes_, flops)


def table(cfg: ModelConfig, hw: Hardware, batches: list[int], context: int,
          dtype_bytes: int = 2) -> str:
    lines = [f"{hw.name}: {hw.bytes_per_s / 1e12:.1f} TB/s, {hw.flops_per_s / 1e12:.0f} TFLOP/s, "
             f"ridge {hw.ridge:.0f} FLOP/B; context {context} tokens, {dtype_bytes}-byte weights",
             f"{'batch':>5} {'MB/token':>9} {'GFLOP/token':>12} {'FLOP/B':>7} "
             f"{'bound tok/s':>12} {'step ms':>8}"]
    for b in batches:
        c = decode_cost(cfg, b, context, dtype_bytes)
        lines.append(f"{b:>5} {c.bytes_per_token / 1e6:9.2f} {c.flops_per_token / 1e9:12.3f} "
                     f"{c.intensity:7.1f} {c.bound_tokens_per_s(hw):12.0f} "
                     f"{c.bound_step_ms(hw):8.3f}")
    return "\n".join(lines)


def plot(costs: list[DecodeCost], hw: Hardware, path: str | Path, label: str,
         measured: dict[int, float] | None = None) -> Path:
    """The roof and the model's decode points; `measured` (batch -> tok/s) adds what the engine
    reached, placed at the same intensity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = [10 ** (i / 10) for i in range(-10, 41)]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.loglog(grid, [min(hw.flops_per_s, g * hw.bytes_per_s) / 1e12 for g in grid], "k-",
              label=f"{hw.name} roof")
    xs = [c.intensity for c in costs]
    ax.loglog(xs, [min(hw.flops_per_s, x * hw.bytes_per_s) / 1e12 for x in xs], "o",
              label=f"{label}: bound")
    # large batches crowd at nearly the same intensity (K/V bytes dominate): one label per group
    groups: list[list[DecodeCost]] = []
    for c in sorted(costs, key=lambda c: c.intensity):
        if groups and c.intensity < groups[-1][0].intensity * 1.3:
            groups[-1].append(c)
        else:
            groups.append([c])
    for group in groups:
        first = group[0]
        ax.annotate("B=" + ",".join(str(c.batch) for c in group),
                    (first.intensity, min(hw.flops_per_s, first.intensity * hw.bytes_per_s) / 1e12),
                    fontsize=7, textcoords="offset points", xytext=(4, -10))
    if measured:
        pts = [(c.intensity, measured[c.batch] * c.flops_per_token / 1e12)
               for c in costs if c.batch in measured]
        ax.loglog([p[0] for p in pts], [p[1] for p in pts], "x", label=f"{label}: measured")
    ax.set_xlabel("FLOP per byte")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
