"""Scheduler settings on top of the engine's."""

from __future__ import annotations

from dataclasses import dataclass

from minisgl.engine.config import EngineConfig
from minisgl.kvcache import PREFIX_CACHE_KINDS

GPU_PREFILL_LENGTH = 8192
CPU_PREFILL_LENGTH = 512
# >>> ch24
SPECULATIVE_ALGORITHMS = ("NGRAM", "STANDALONE")  # SGLang's names (chapter 24)
MAX_DRAFT_TOKENS = 16
# <<< ch24
# >>> ch25
GRAMMAR_BACKENDS = ("xgrammar", "none")  # SGLang's --grammar-backend values that exist here
# <<< ch25


@dataclass
class SchedulerConfig(EngineConfig):
    cache_type: str = "radix"  # "radix" shares prefixes between requests, "naive" never does
    # Token budget of one prefill batch (chunked prefill); None: 8192 on a GPU (as the official
    # engine), 512 on a CPU, where one 512-token chunk late in an 8k prompt already takes
    # seconds and every running request waits for it (docs/chapters/ch09.md has the figures).
    max_prefill_length: int | None = None
    # >>> ch24
    # Speculative decoding (chapter 24): None (off), "NGRAM" (guesses from the request's own
    # tokens) or "STANDALONE" (a small draft model with the same tokenizer).
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None  # STANDALONE only
    speculative_num_draft_tokens: int = 4  # guesses per request and step (k)
    # <<< ch24
    # >>> ch25
    # Structured output (chapter 25): "xgrammar" compiles the grammars requests ask for, "none"
    # refuses such requests.
    grammar_backend: str = "xgrammar"
    # <<< ch25

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_prefill_length is None:
            self.max_prefill_length = GPU_PREFILL_LENGTH if self.device.startswith("cuda") \
                else CPU_PREFILL_LENGTH
        if self.cache_type not in PREFIX_CACHE_KINDS:
            raise ValueError(f"cache_type must be one of {PREFIX_CACHE_KINDS}, "
                             f"got {self.cache_type!r}")
        if self.max_prefill_length < 1:
            raise ValueError(f"max_prefill_length must be >= 1, got {self.max_prefill_length}")
        # >>> ch25
        if self.grammar_backend not in GRAMMAR_BACKENDS:
            raise ValueError(f"grammar_backend must be one of {', '.join(GRAMMAR_BACKENDS)}, "
                             f"got {self.grammar_backend!r}")
        # <<< ch25
        # >>> ch24
        self._check_speculative()

    def _check_speculative(self) -> None:
        if isinstance(self.speculative_algorithm, str):
            self.speculative_algorithm = self.speculative_algorithm.upper()
        algo = self.speculative_algorithm
        if algo is None:
            if self.speculative_draft_model_path is not None:
                raise ValueError("speculative_draft_model_path needs speculative_algorithm "
                                 "STANDALONE")
            return
        if algo not in SPECULATIVE_ALGORITHMS:
            raise ValueError(f"speculative_algorithm must be one of "
                             f"{', '.join(SPECULATIVE_ALGORITHMS)} (or None), got {algo!r}")
        if (algo == "STANDALONE") != (self.speculative_draft_model_path is not None):
            raise ValueError("speculative_algorithm STANDALONE needs "
                             "speculative_draft_model_path, and only it takes one")
        if not 1 <= self.speculative_num_draft_tokens <= MAX_DRAFT_TOKENS:
            raise ValueError(f"speculative_num_draft_tokens must be in [1, {MAX_DRAFT_TOKENS}], "
                             f"got {self.speculative_num_draft_tokens}")
        if self.tp_size > 1:
            raise ValueError("speculative decoding runs on one GPU or the CPU (tp_size 1)")
        # <<< ch24
