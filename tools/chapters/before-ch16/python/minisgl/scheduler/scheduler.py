"""The scheduler loop: choose a batch, run it, hand back one token per request.

Each `step()` runs one forward pass: a prefill batch when waiting requests can start (prefill
first keeps time-to-first-token low), otherwise a decode step over every running request. New
requests can be added between any two steps and join the running set as soon as their prefill is
done (continuous batching). A long prompt prefilled in chunks (chapter 9) does not hold the
others: after each of its chunks the running requests decode one step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from minisgl.core import MIN_TEMPERATURE, Batch, Req, SamplingParams, TokenOutput
from minisgl.engine.engine import Engine
from minisgl.kvcache import create_prefix_cache
from minisgl.utils import init_logger

from .cache import CacheManager
from .config import SchedulerConfig
from .decode import DecodeManager
from .prefill import PrefillManager
from .table import TableManager

logger = init_logger(__name__)


@dataclass
class SchedulerStats:
    """What the scheduler has done since it started, and where its KV pages are now."""

    prefill_batches: int = 0
    decode_batches: int = 0
    retracted: int = 0  # times a running request was sent back to wait for memory
    restarted_prefills: int = 0  # half-prefilled prompts that gave their pages back
    total_pages: int = 0
    free_pages: int = 0
    cached_pages: int = 0  # kept by the prefix cache
    request_pages: int = 0  # held by live requests
    running_requests: int = 0
    waiting_requests: int = 0


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.engine = Engine(config)
        self.eos_token_ids = self.engine.model_config.eos_token_ids
        self.table = TableManager(config.max_running_reqs)
        prefix_cache = create_prefix_cache(config.cache_type, self.engine.page_size)
        self.cache = CacheManager(self.engine.num_pages, self.engine.page_size,
                                  self.engine.page_table, prefix_cache)
        self.prefill = PrefillManager(self.cache, self.table)
        self.decode = DecodeManager(self.cache)
        self._early_outputs: list[TokenOutput] = []
        self._next_uid = 0
        self._counts = SchedulerStats()  # only its counters are kept up to date
        # >>> ch09
        self._decode_turn = False  # the next step decodes: a prompt is part-way (_schedule)
        # <<< ch09

    @property
    def has_work(self) -> bool:
        return self.prefill.runnable or self.decode.runnable or bool(self._early_outputs)

    def add_request(self, input_ids: list[int], params: SamplingParams,
                    uid: int | None = None) -> int:
        """Queue a request; a request that cannot run gets an error output from the next step.

        This is the one place where a request's limits are decided: max_tokens None becomes what
        the context and the whole KV pool leave after the prompt."""
        uid = self._new_uid() if uid is None else uid
        max_tokens = params.max_tokens or self._room() - len(input_ids)
        error = self._check_request(input_ids, params) or \
            self._check_fits(len(input_ids), max_tokens)
        if error is not None:
            self._early_outputs.append(TokenOutput(uid=uid, finished=True, finish_reason="error",
                                                   error=error, prompt_tokens=len(input_ids)))
            return uid
        params = replace(params, max_tokens=max_tokens)
        self.prefill.add(Req(uid=uid, input_ids=list(input_ids), sampling_params=params))
        return uid

    def _new_uid(self) -> int:
        self._next_uid += 1
        return self._next_uid - 1

    def _room(self) -> int:
        """The most tokens one request can hold: the context, or the whole KV pool if smaller."""
        return min(self.engine.max_seq_len, self.cache.capacity_tokens)

    def _check_request(self, input_ids: list[int], params: SamplingParams) -> str | None:
        """What the model and the sampler cannot compute. The API server checks the same first;
        checking again here keeps one bad request from breaking a forward pass for the batch."""
        if not input_ids:
            return "the prompt is empty"
        vocab = self.engine.model_config.vocab_size
        bad = next((i for i in input_ids if not 0 <= i < vocab), None)
        if bad is not None:
            return f"token id {bad} is outside the vocabulary [0, {vocab})"
        if not (params.top_k == -1 or 1 <= params.top_k <= vocab):
            return f"top_k must be -1 (off) or in [1, {vocab}], got {params.top_k}"
        if not (params.temperature == 0 or MIN_TEMPERATURE <= params.temperature < math.inf):
            return f"temperature must be 0 or in [{MIN_TEMPERATURE}, inf), got {params.temperature}"
        return None

    def _check_fits(self, prompt_len: int, max_tokens: int) -> str | None:
        limit = self.engine.max_seq_len
        if prompt_len >= limit or prompt_len + max_tokens > limit:
            shown = "" if prompt_len >= limit else f" + max_tokens ({max_tokens})"
            return (f"prompt ({prompt_len} tokens){shown} exceeds the context length of "
                    f"{limit} tokens")
        capacity = self.cache.capacity_tokens
        if prompt_len >= capacity or prompt_len + max_tokens > capacity:
            return (f"the request needs up to {prompt_len + max(max_tokens, 1)} KV slots (prompt "
                    f"+ max_tokens) but the whole KV pool holds {capacity}")
        return None

    def abort(self, uid: int) -> TokenOutput | None:
        """Drop a request wherever it is and free its memory; its last output (finish_reason
        "abort"), or None if it was not found (already finished, or never added)."""
        req = self.prefill.abort(uid) or self.decode.abort(uid)
        if req is None:
            return None
        if req.table_idx >= 0:
            self._free(req)
        return TokenOutput(uid=uid, finished=True, finish_reason="abort",
                           prompt_tokens=req.prompt_len, cached_tokens=req.cached_tokens)

    def step(self) -> list[TokenOutput]:
        outputs, self._early_outputs = self._early_outputs, []
        batch = self._schedule()
        if batch is None:
            return outputs
        self._prepare(batch)
        if batch.is_prefill:
            self._counts.prefill_batches += 1
        else:
            self._counts.decode_batches += 1
        tokens = self.engine.forward_batch(batch).tolist()
        return outputs + self._process(batch, tokens)

    def _schedule(self) -> Batch | None:
        # >>> ch09
        if self._decode_turn:
            # The last prefill batch left a prompt part-way: the running requests (including
            # any short ones that batch started) decode once before its next chunk. Without
            # this turn all chunks of a long prompt run back to back and nobody else gets a
            # token until it is done. Alternating is the simplest rule that bounds their wait
            # by one chunk; putting their decode tokens into the chunk's batch would save a
            # forward pass but needs a batch that is part prefill, part decode, which the engine
            # does not have.
            self._decode_turn = False
            batch = self._schedule_decode()
            if batch is not None:
                return batch
        # <<< ch09
        reserve = len(self.decode.running) * self.engine.page_size
        batch = self.prefill.schedule(self.config.max_prefill_length, reserve)
        if batch is not None:
            # >>> ch09
            last = batch.reqs[-1]  # only the last request of a batch can be chunked
            self._decode_turn = last.seq_len < len(last.input_ids)
            # <<< ch09
            return batch
        return self._schedule_decode()

    def _schedule_decode(self) -> Batch | None:
        """Every running request gets a slot for its next token. When the pool runs short,
        half-prefilled prompts give their pages back first, then the newest running request."""
        while self.decode.running and not self.decode.allocate_next_slots():
            if self._free_waiting():
                continue  # running requests go before chunked prompts
            if len(self.decode.running) == 1:
                raise RuntimeError("one request alone does not fit in the KV pool")
            self._retract(self.decode.running.pop())  # the newest request gives way
        return self.decode.batch()

    def _free_waiting(self) -> bool:
        """Release the pages of waiting requests that are part-way through a chunked prefill;
        they start their prompt again later. True if anything was freed."""
        holding = [r for r in self.prefill.waiting if r.table_idx >= 0]
        for req in holding:
            self._free(req)
            req.cached_len = 0
        self._counts.restarted_prefills += len(holding)
        return bool(holding)

    def _retract(self, req: Req) -> None:
        logger.info("KV pool full: request %d goes back to the waiting queue", req.uid)
        self._counts.retracted += 1
        self._free(req)
        req.cached_len = 0
        self.prefill.add(req, front=True)

    def _prepare(self, batch: Batch) -> None:
        device = self.engine.device
        ids: list[int] = []
        for req in batch.reqs:
            ids += req.input_ids[req.cached_len : req.seq_len]
        positions = torch.cat([torch.arange(r.cached_len, r.seq_len) for r in batch.reqs])
        rows = torch.cat([torch.full((r.extend_len,), r.table_idx) for r in batch.reqs])
        batch.input_ids = torch.tensor(ids, dtype=torch.int64, device=device)
        batch.positions = positions.to(device)
        batch.out_loc = self.engine.page_table[rows.to(device), batch.positions].long()

    def _process(self, batch: Batch, tokens: list[int]) -> list[TokenOutput]:
        outputs = []
        for req, token in zip(batch.reqs, tokens):
            req.cached_len += req.extend_len
            req.extend_len = 0
            if req.cached_len < len(req.input_ids):
                continue  # a chunk of a longer prompt: its sampled token means nothing yet
            req.input_ids.append(token)
            reason = self._finish_reason(req, token)
            outputs.append(TokenOutput(uid=req.uid, token=token, finished=reason is not None,
                                       finish_reason=reason, prompt_tokens=req.prompt_len,
                                       cached_tokens=req.cached_tokens))
            if reason is not None:
                if not batch.is_prefill:
                    self.decode.remove(req)
                self._free(req)
            elif batch.is_prefill:
                self.cache.release(req, finished=False)  # share the prompt with later requests
                self.decode.add(req)
        return outputs

    def _finish_reason(self, req: Req, token: int) -> str | None:
        if token in self.eos_token_ids and not req.sampling_params.ignore_eos:
            return "stop"
        if len(req.output_ids) >= req.sampling_params.max_tokens:
            return "length"
        return None

    def _free(self, req: Req) -> None:
        self.cache.release(req, finished=True)
        self.table.free(req.table_idx)
        req.table_idx = -1

    def check_integrity(self) -> None:
        self.cache.check_integrity(self.decode.running + [r for r in self.prefill.waiting
                                                          if r.table_idx >= 0])

    def stats(self) -> SchedulerStats:
        return replace(self._counts, **self.cache.page_counts(),
                       running_requests=len(self.decode.running),
                       waiting_requests=len(self.prefill.waiting))

    def flush_cache(self) -> None:
        """Drop every cached prefix (only when no request is running); pages return to free."""
        if self.decode.running or any(r.table_idx >= 0 for r in self.prefill.waiting):
            raise RuntimeError("cannot flush the prefix cache while requests hold pages")
        self.cache.flush()

    def shutdown(self) -> None:
        self.engine.shutdown()
