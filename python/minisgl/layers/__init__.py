"""The building blocks of a decoder-only transformer."""

from .attention import AttentionLayer
from .base import BaseOP, OPList
from .embedding import ParallelLMHead, VocabParallelEmbedding
from .linear import LinearColParallelMerged, LinearQKVMerged, LinearReplicated, LinearRowParallel
from .norm import RMSNorm, RMSNormFused
from .rotary import RotaryEmbedding

__all__ = [
    "AttentionLayer",
    "BaseOP",
    "LinearColParallelMerged",
    "LinearQKVMerged",
    "LinearReplicated",
    "LinearRowParallel",
    "OPList",
    "ParallelLMHead",
    "RMSNorm",
    "RMSNormFused",
    "RotaryEmbedding",
    "VocabParallelEmbedding",
]
