"""The engine's core data types."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import torch

# Below this, dividing fp32 logits by the temperature can overflow to inf (and softmax to NaN);
# the API server sends such temperatures as greedy, as the sampler's argmax would pick anyway.
MIN_TEMPERATURE = 1e-5
# >>> ch16
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs: most likely tokens reported per step
# A repetition penalty divides logits: far above this it only turns them into 0 (or inf)
MAX_REPETITION_PENALTY = 100.0
# <<< ch16


@dataclass
class SamplingParams:
    """How to pick each next token, per request (the official mini-sglang's fields).

    temperature 0 means greedy; top_k -1 and top_p 1.0 switch those filters off. max_tokens None
    means as many new tokens as the context and the KV pool leave after the prompt (the scheduler
    decides when it admits the request).
    """

    temperature: float = 0.0
    top_k: int = -1
    top_p: float = 1.0
    ignore_eos: bool = False
    max_tokens: int | None = 1024
    # >>> ch14
    # The random seed of this request's sampling (OpenAI's `seed`): None draws from the engine's
    # generator. The API server passes it through; the sampler decides what it means.
    seed: int | None = None
    # <<< ch14
    # >>> ch16
    # Penalties on tokens already seen (the device sampler, chapter 16). presence and frequency
    # (OpenAI): logit -= presence * [count > 0] + frequency * count, over generated tokens.
    # repetition (HF, vLLM): over prompt and generated tokens, a positive logit is divided by it
    # and a negative one multiplied. 0, 0 and 1 switch them off.
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # None: no log-probabilities; k >= 0: each new token's log-probability and the k most likely
    # tokens' (from the raw logits, before penalties and temperature).
    logprobs: int | None = None
    # <<< ch16
    # >>> ch25
    # Structured output (chapter 25), SGLang's fields: at most one grammar the answer must match,
    # a JSON Schema (as a string), a regular expression, or an EBNF grammar (XGrammar's dialect).
    json_schema: str | None = None
    regex: str | None = None
    ebnf: str | None = None
    # <<< ch25

    def __post_init__(self) -> None:
        if not self.temperature >= 0:  # also rejects NaN
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not (self.top_k == -1 or self.top_k >= 1):
            raise ValueError(f"top_k must be -1 (off) or >= 1, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be > 0, got {self.max_tokens}")
        # >>> ch16
        for name in ("presence_penalty", "frequency_penalty"):
            if not abs(getattr(self, name)) <= 2:  # also rejects NaN
                raise ValueError(f"{name} must be in [-2, 2], got {getattr(self, name)}")
        if not 0 < self.repetition_penalty <= MAX_REPETITION_PENALTY:
            raise ValueError(f"repetition_penalty must be in (0, {MAX_REPETITION_PENALTY}], got "
                             f"{self.repetition_penalty}")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must be None or in [0, {MAX_TOP_LOGPROBS}], got "
                             f"{self.logprobs}")
        # <<< ch16
        # >>> ch25
        named = [n for n in ("json_schema", "regex", "ebnf") if getattr(self, n) is not None]
        if len(named) > 1:
            raise ValueError(f"at most one of json_schema, regex and ebnf may be given, got "
                             f"{' and '.join(named)}")
        # <<< ch25

    @property
    def is_greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1
    # >>> ch16

    @property
    def has_penalties(self) -> bool:
        return (self.presence_penalty != 0 or self.frequency_penalty != 0
                or self.repetition_penalty != 1)
    # <<< ch16
# >>> ch06


@dataclass(eq=False)
class Req:
    """One request inside the engine. Its tokens grow as it decodes.

    K/V of input_ids[:cached_len] are already in the KV pool (computed earlier, or shared from the
    prefix cache); a forward pass computes the next `extend_len` tokens after them.
    """

    uid: int
    input_ids: list[int]  # prompt, then every generated token
    sampling_params: SamplingParams
    prompt_len: int = -1
    table_idx: int = -1  # this request's row of the page table, -1 while not admitted
    cached_len: int = 0
    extend_len: int = 0  # tokens to compute in the current batch
    # The scheduler's bookkeeping of this request's KV memory (chapter 8):
    shared_len: int = 0  # positions [0, shared_len) use slots owned by the prefix cache
    alloc_len: int = 0  # positions [0, alloc_len) have a slot in the page table row
    cache_handle: object | None = None  # the prefix-cache node this request keeps locked
    cached_tokens: int = 0  # prompt tokens reused from the prefix cache at admission

    def __post_init__(self) -> None:
        if self.prompt_len < 0:
            self.prompt_len = len(self.input_ids)

    @property
    def output_ids(self) -> list[int]:
        return self.input_ids[self.prompt_len:]

    @property
    def seq_len(self) -> int:
        """Tokens whose K/V exist once the current batch has run."""
        return self.cached_len + self.extend_len


@dataclass
class Batch:
    """The requests of one forward pass, either all prefill (extend) or all decode.

    The scheduler fills input_ids/positions/out_loc; the attention backend adds its metadata.
    """

    reqs: list[Req]
    phase: str  # "prefill" or "decode"
    input_ids: torch.Tensor = field(init=False)  # [tokens] new tokens of all requests
    positions: torch.Tensor = field(init=False)  # [tokens]
    out_loc: torch.Tensor = field(init=False)  # [tokens] KV pool slots of the new tokens
    attn_metadata: object = field(init=False)

    @property
    def is_prefill(self) -> bool:
        return self.phase == "prefill"

    @property
    def size(self) -> int:
        return len(self.reqs)


class AttentionBackend(Protocol):
    """What an attention layer asks of the backend (attention/base.py's BaseAttnBackend is one).
    This module names only this, so it never imports the backends, which import it."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer_id: int,
                batch: Batch) -> torch.Tensor: ...


@dataclass
class Context:
    """What a layer deep inside the model needs during a forward pass: the batch and the backend.

    `model.forward` takes only token ids and positions, so the attention layers find the current
    batch here. Set by the engine; the batch is only present inside `forward_batch`.
    """

    attn_backend: AttentionBackend
    batch: Batch | None = None

    @contextmanager
    def forward_batch(self, batch: Batch) -> Iterator[None]:
        if self.batch is not None:
            raise RuntimeError("forward_batch calls cannot nest")
        self.batch = batch
        try:
            yield
        finally:
            self.batch = None


# The engine's one global: only the attention layers read it, to find the current batch. Everything
# else (the backend's KV pool and page table included) is handed over when it is built.
_GLOBAL_CTX: Context | None = None


def set_global_ctx(ctx: Context | None) -> None:
    global _GLOBAL_CTX
    _GLOBAL_CTX = ctx


def get_global_ctx() -> Context | None:
    """The engine's context, or None when no engine has been built (chapters 3-4 style use)."""
    return _GLOBAL_CTX
# <<< ch06
# >>> ch08


@dataclass(slots=True)
class TokenOutput:
    """What one scheduler step produced for one request: its new token, and whether it is done.

    The scheduler (chapter 8) hands these to LLM.generate or, as messages (chapter 12), to the
    detokenizer, which adds the text (UserReply) for the frontend. Every one carries the prompt
    length, so a frontend that stops reading early still knows the usage counts.

    Not frozen: the scheduler makes one per running request per step, and a frozen dataclass
    sets each field through object.__setattr__, which made this constructor about 3x slower
    (4.2 against 1.4 us on the 2-core VM: a millisecond per step at batch 256).
    """

    uid: int
    token: int | None = None  # None when the request ended without a new token (error, abort)
    finished: bool = False
    finish_reason: str | None = None  # "stop", "length", "abort" or "error"
    error: str | None = None  # why the request could not run (finish_reason "error")
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens that came from the prefix cache
# <<< ch08
# >>> ch16
    # When the request asked (SamplingParams.logprobs): the token's log-probability, and the
    # most likely tokens with theirs, most likely first.
    logprob: float | None = None
    top_ids: list[int] | None = None
    top_logprobs: list[float] | None = None
# <<< ch16
# >>> ch24
    # Speculative decoding (chapter 24): how many verification steps the request has had, so
    # that completion_tokens / spec_verify_ct is its mean acceptance length (SGLang's meta_info).
    spec_verify_ct: int = 0
# <<< ch24
