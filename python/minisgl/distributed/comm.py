"""The process group and the two collectives a tensor-parallel forward pass needs.

torch.distributed is the transport: NCCL between GPUs, gloo between CPU processes (so CI runs
tensor parallelism on a laptop). At world size 1 every helper returns its input untouched and no
torch.distributed call is made, so the one-GPU path costs nothing.
"""

from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from .info import TPInfo, get_tp_info, set_tp_info

# NVLink multicast (NVLS) stays off in NCCL, PyTorch and NVSHMEM: on shared H100/H200 hosts a
# program that uses it can take the host's GPUs out of service. Set in every rank before NCCL starts.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


# How long a rank waits for the others, at the rendezvous and in every collective. Ranks on other
# machines come from launchers that may be started by hand, minutes apart; a rank that never comes
# (or stops answering) is still an error after this long, never a hang.
TIMEOUT_S = 600.0


def init_tp(rank: int, size: int, init_method: str, device: torch.device | str,
            timeout_s: float = TIMEOUT_S) -> TPInfo:
    """Join the group of `size` ranks at `init_method` (e.g. tcp://127.0.0.1:29500) as `rank`."""
    info = set_tp_info(rank, size)
    if size == 1:
        return info
    device = torch.device(device)
    if device.type == "cuda":
        os.environ.update(NO_MULTICAST)
        torch.cuda.set_device(device)
    else:  # ranks on one CPU share its cores; more threads than cores only slows them all
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    backend = "nccl" if device.type == "cuda" else "gloo"
    try:
        dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=timeout_s))
    except dist.DistError as e:  # torch's message says what failed, not what it was for
        raise RuntimeError(f"rank {rank} of {size} could not meet the other ranks at "
                           f"{init_method} (waiting at most {timeout_s:.0f} s; is every rank "
                           f"started, with this address?): {e}") from None
    return info


def destroy_tp() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    set_tp_info(0, 1)


def all_reduce(x: torch.Tensor) -> torch.Tensor:
    """Sum x over the ranks, in place (every rank gets the same sum)."""
    if get_tp_info().size > 1:
        dist.all_reduce(x)
    return x


def all_gather_last_dim(x: torch.Tensor) -> torch.Tensor:
    """Concatenate each rank's x along the last dimension, in rank order: [..., n] -> [..., tp*n]."""
    size = get_tp_info().size
    if size == 1:
        return x
    x = x.contiguous()
    out = x.new_empty((size * x.shape[0], *x.shape[1:]))  # ranks stacked along the first dim
    _all_gather_single(out, x)
    return out.view(size, *x.shape).movedim(0, -2).reshape(*x.shape[:-1], size * x.shape[-1])


# torch 2.13 renamed all_gather_into_tensor (and warns on the old name); torch 2.11 has only that
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _int_tensor(value: int) -> torch.Tensor:
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    return torch.tensor([value], dtype=torch.int64, device=device)


def broadcast_int(value: int) -> int:
    """Rank 0's value on every rank (e.g. the sampling seed, so all ranks draw the same tokens)."""
    if get_tp_info().size == 1:
        return value
    t = _int_tensor(value)
    dist.broadcast(t, src=0)
    return int(t.item())


def min_over_ranks(value: int) -> int:
    """The smallest of the ranks' values (e.g. KV pages: each rank measures its own free memory)."""
    if get_tp_info().size == 1:
        return value
    t = _int_tensor(value)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return int(t.item())
