"""Building the speculator from the scheduler's config (chapter 24).

A STANDALONE draft model is a second Engine: its own weights and KV pool, the target's page
table. Both pools have the same number of pages, so the KV budget (memory_ratio on a GPU,
cpu_kv_bytes on a CPU) is shared: the target sizes its pool for the bytes per token of both.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from minisgl.core import set_global_ctx
from minisgl.engine.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.models.config import ModelConfig
from minisgl.utils import init_logger
from minisgl.utils.hf import resolve_model
from minisgl.utils.misc import MinisglError

from .draft import DraftModel
from .speculator import SlotAllocator, Speculator

logger = init_logger(__name__)
C = TypeVar("C", bound=EngineConfig)


def resolve_draft(name_or_path: str, dummy_weight: bool) -> str:
    """The draft's local folder. It needs no tokenizer files of its own (it shares the
    target's), so a folder with a config.json is taken as it is; anything else is looked up
    like a model (utils/hf.py), with the same errors."""
    folder = Path(name_or_path).expanduser()
    if (folder / "config.json").is_file():
        return str(folder)
    return str(resolve_model(name_or_path, dummy_weight=dummy_weight))


@dataclass(frozen=True)
class SpeculativeSettings:
    """The scheduler's speculative_* settings (scheduler/config.py checks them), with the draft
    found once."""

    algorithm: str | None  # None, "NGRAM" or "STANDALONE"
    draft_path: str | None  # STANDALONE: the draft's local folder
    num_draft_tokens: int

    @classmethod
    def resolve(cls, algorithm: str | None, draft_model_path: str | None,
                num_draft_tokens: int, dummy_weight: bool) -> SpeculativeSettings:
        path = None
        if algorithm == "STANDALONE" and draft_model_path is not None:
            path = resolve_draft(draft_model_path, dummy_weight)
        return cls(algorithm, path, num_draft_tokens)


def with_room_for_draft(config: C, spec: SpeculativeSettings) -> C:
    """The target's config, its KV budget shared with a STANDALONE draft's pool."""
    path = spec.draft_path
    if path is None or config.num_pages is not None:
        return config
    mc = ModelConfig.from_path(path)
    per_token = 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * config.dtype.itemsize
    return dataclasses.replace(config, extra_kv_bytes_per_token=per_token)


def build_speculator(config: EngineConfig, spec: SpeculativeSettings, target: Engine,
                     cache: SlotAllocator) -> Speculator | None:
    """None without an algorithm; else the speculator, with its draft model."""
    if spec.algorithm is None:
        return None
    draft = None
    if spec.draft_path is not None:
        draft = DraftModel(_draft_engine(config, spec.draft_path, target))
        set_global_ctx(target.ctx)  # building an engine makes its context the current one
    logger.info("speculative decoding: %s, %d draft tokens per step", spec.algorithm,
                spec.num_draft_tokens)
    return Speculator(spec.algorithm, spec.num_draft_tokens, target, cache, draft)


def _draft_engine(config: EngineConfig, path: str, target: Engine) -> Engine:
    """The draft model's engine: the target's page table, as many pages, the same context."""
    mc = ModelConfig.from_path(path)
    if mc.vocab_size != target.model_config.vocab_size:
        raise MinisglError(f"the draft model {path} has a vocabulary of {mc.vocab_size} tokens, "
                           f"the target {target.model_config.vocab_size}: they must share the "
                           f"tokenizer")
    if mc.max_position_embeddings < target.max_seq_len:
        raise MinisglError(f"the draft model {path} handles {mc.max_position_embeddings} "
                           f"positions, fewer than the target's context of {target.max_seq_len} "
                           f"(set max_seq_len to at most that)")
    # Only the engine's own fields: a SchedulerConfig's others mean nothing to a draft.
    base = {f.name: getattr(config, f.name) for f in dataclasses.fields(EngineConfig)}
    draft_config = EngineConfig(**{**base, "model_path": path, "num_pages": target.num_pages,
                                   "max_seq_len": target.max_seq_len,
                                   "extra_kv_bytes_per_token": 0, "trace_dir": None,
                                   "trace_set": None})
    return Engine(draft_config, page_table=target.page_table)
