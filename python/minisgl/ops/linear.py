"""y = x W^T + b: every projection of the model (the layers in layers/linear.py cut the weights
for tensor parallelism and call this on their slice)."""

from __future__ import annotations

import torch.nn.functional as F

from .registry import Op

linear = Op("linear", F.linear)
