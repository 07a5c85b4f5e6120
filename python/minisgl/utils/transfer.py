"""Host-to-device copies that never make the CPU wait for the GPU (chapter 16).

A plain `torch.tensor(values, device="cuda")` or `gpu_tensor.copy_(cpu_tensor)` copies from
pageable memory, and PyTorch then synchronizes the stream: the CPU waits until every kernel queued
before the copy has run. With overlap scheduling that is exactly the wait we must never have, since
the queue holds the step in flight. A copy from page-locked (pinned) memory with non_blocking=True
is queued like a kernel and returns at once. It runs in stream order, so a kernel queued after it
sees the new values and one queued before it does not.

The staging buffer is fresh for every copy: PyTorch's pinned-memory cache hands a block out again
only after the copies that read it have run, so the caller may change its own data right away.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def to_device(data: Sequence[int] | Sequence[float] | torch.Tensor, dtype: torch.dtype,
              device: torch.device) -> torch.Tensor:
    """A new tensor on `device` holding `data`; on a GPU the copy is queued, not waited for."""
    if device.type != "cuda":
        return torch.as_tensor(data, dtype=dtype, device=device)
    host = torch.as_tensor(data, dtype=dtype)
    staged = torch.empty(host.shape, dtype=dtype, pin_memory=True).copy_(host)
    return staged.to(device, non_blocking=True)


def copy_to_device(dst: torch.Tensor, data: Sequence[int] | Sequence[float] | torch.Tensor
                   ) -> None:
    """dst[...] = data, queued on the current stream (dst on a GPU) or done now (on a CPU)."""
    if dst.device.type != "cuda":
        dst.copy_(torch.as_tensor(data, dtype=dst.dtype))
        return
    host = torch.as_tensor(data, dtype=dst.dtype)
    staged = torch.empty(host.shape, dtype=dst.dtype, pin_memory=True).copy_(host)
    dst.copy_(staged, non_blocking=True)
