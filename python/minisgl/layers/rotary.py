"""Rotary position embedding (RoPE), with the frequency scalings Llama 3 and Qwen3 use.

Each pair of channels (i, i + d/2) of a head is rotated by the angle position * inv_freq[i]
("neox" layout, as Hugging Face Llama/Qwen checkpoints expect; the rotation itself is in
ops/rope.py). The cos/sin tables are computed once for every position up to max_position, so a
forward pass only gathers rows.
"""

from __future__ import annotations

import math

import torch

from minisgl.models.config import RopeScaling
from minisgl.ops.rope import rotate_qk

from .base import BaseOP


def _base_inv_freq(head_dim: int, base: float) -> torch.Tensor:
    return 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))


def _llama3_inv_freq(inv_freq: torch.Tensor, s: RopeScaling, max_position: int) -> torch.Tensor:
    # Llama 3: long wavelengths (low frequencies) are slowed down by `factor`, short ones kept,
    # and the band between the two cut-offs blends smoothly between the two.
    original = s.original_max_position or max_position
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = original / s.low_freq_factor
    high_freq_wavelen = original / s.high_freq_factor
    smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * inv_freq / s.factor + smooth * inv_freq
    out = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, blended, out)


def _yarn_inv_freq(head_dim: int, base: float, s: RopeScaling, max_position: int
                   ) -> tuple[torch.Tensor, float]:
    # YaRN (Qwen3's long-context mode): dimensions that rotate many times over the original
    # context keep their frequency (extrapolate), slow ones are divided by `factor`
    # (interpolate), with a linear ramp between; attention logits are rescaled by mscale.
    original = s.original_max_position or max_position

    def dim_for_rotations(rotations: float) -> float:
        return head_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(dim_for_rotations(s.beta_fast)), 0)
    high = min(math.ceil(dim_for_rotations(s.beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001  # avoid dividing by zero in the ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    wavelength_scale = base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    extrapolate = 1.0 / wavelength_scale
    interpolate = 1.0 / (s.factor * wavelength_scale)
    keep = 1 - ramp  # how much of each pair keeps its original frequency
    inv_freq = interpolate * (1 - keep) + extrapolate * keep
    mscale = s.attention_factor
    if mscale is None:
        mscale = 0.1 * math.log(s.factor) + 1.0 if s.factor > 1 else 1.0
    return inv_freq, mscale


def compute_inv_freq(head_dim: int, base: float, scaling: RopeScaling, max_position: int
                     ) -> tuple[torch.Tensor, float]:
    """Per-pair rotation frequencies and the factor applied to cos/sin."""
    inv_freq = _base_inv_freq(head_dim, base)
    if scaling.kind == "linear":
        return inv_freq / scaling.factor, 1.0
    if scaling.kind == "llama3":
        return _llama3_inv_freq(inv_freq, scaling, max_position), 1.0
    if scaling.kind == "yarn":
        return _yarn_inv_freq(head_dim, base, scaling, max_position)
    return inv_freq, 1.0


class RotaryEmbedding(BaseOP):
    def __init__(self, head_dim: int, max_position: int, base: float,
                 scaling: RopeScaling | None = None) -> None:
        device = torch.empty(0).device  # the default device the model is being built on
        with torch.device("cpu"):  # the tables are computed once, in fp32, on the CPU
            inv_freq, mscale = compute_inv_freq(head_dim, base, scaling or RopeScaling(),
                                                max_position)
            freqs = torch.outer(torch.arange(max_position, dtype=torch.float32), inv_freq)
            angles = torch.cat((freqs, freqs), dim=-1)
        self._cos = (angles.cos() * mscale).to(device)
        self._sin = (angles.sin() * mscale).to(device)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """q: [tokens, qo_heads, head_dim], k: [tokens, kv_heads, head_dim]. (The attention layer
        hands the tables to ops.rope instead, which splits q, k from the q|k|v projection and
        normalises them first for Qwen3.)"""
        return rotate_qk(q, k, positions, self._cos, self._sin)
