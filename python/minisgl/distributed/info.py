"""Which tensor-parallel rank this process is, and how many there are (chapter 17).

Layers read it while they are built, to know how much of each weight they hold, so it is set once
per process before the model is created. A process that never sets it is rank 0 of 1: the whole
model, and no communication at all.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TPInfo:
    rank: int
    size: int

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"tensor-parallel rank {self.rank} of {self.size} is not valid")

    @property
    def is_primary(self) -> bool:
        """Rank 0 talks to the tokenizer and the detokenizer; the others follow it."""
        return self.rank == 0


_TP_INFO = TPInfo(0, 1)


def set_tp_info(rank: int, size: int) -> TPInfo:
    global _TP_INFO
    _TP_INFO = TPInfo(rank, size)
    return _TP_INFO


def get_tp_info() -> TPInfo:
    return _TP_INFO


def divide(total: int, parts: int, what: str) -> int:
    """total / parts, which must be exact: a rank cannot hold half a head."""
    if total % parts:
        raise ValueError(f"{what} ({total}) is not divisible by the tensor-parallel size {parts}")
    return total // parts


def kv_heads_per_rank(num_kv_heads: int, tp: int) -> int:
    """Each rank's KV heads. With fewer KV heads than ranks, several ranks hold a copy of the
    same head (each serves the query heads that read it), so the count must divide the ranks."""
    if num_kv_heads >= tp:
        return divide(num_kv_heads, tp, "the number of KV heads")
    if tp % num_kv_heads:
        raise ValueError(f"{num_kv_heads} KV heads cannot be replicated evenly over {tp} ranks "
                         "(the tensor-parallel size must be a multiple of the KV heads)")
    return 1


def kv_head_start(num_kv_heads: int, rank: int, tp: int) -> int:
    """The first KV head of `rank` in the checkpoint's order."""
    if num_kv_heads >= tp:
        return rank * (num_kv_heads // tp)
    return rank // (tp // num_kv_heads)  # tp / num_kv_heads neighbouring ranks share one head
