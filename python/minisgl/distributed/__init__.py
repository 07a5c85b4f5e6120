"""Tensor parallelism (chapter 17): who this rank is, the process group, and its collectives."""

from .comm import (
    all_gather_last_dim,
    all_reduce,
    broadcast_int,
    destroy_tp,
    init_tp,
    min_over_ranks,
)
from .info import TPInfo, divide, get_tp_info, kv_head_start, kv_heads_per_rank, set_tp_info

__all__ = ["TPInfo", "all_gather_last_dim", "all_reduce", "broadcast_int", "destroy_tp",
           "divide", "get_tp_info", "init_tp", "kv_head_start", "kv_heads_per_rank",
           "min_over_ranks", "set_tp_info"]
