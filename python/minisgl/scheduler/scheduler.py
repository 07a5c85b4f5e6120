"""The scheduler loop: choose a batch, run it, hand back one token per request.

Each `step()` runs one forward pass: a prefill batch when waiting requests can start (prefill
first keeps time-to-first-token low), otherwise a decode step over every running request. New
requests can be added between any two steps and join the running set as soon as their prefill is
done (continuous batching).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine.engine import Engine
from minisgl.kvcache import create_prefix_cache
from minisgl.utils import init_logger

from .cache import CacheManager
from .config import SchedulerConfig
from .decode import DecodeManager
from .prefill import PrefillManager
from .table import TableManager

logger = init_logger(__name__)


@dataclass(frozen=True)
class TokenOutput:
    """One step's result for one request: a new token, and whether the request is done."""

    uid: int
    token: int | None  # None when the request failed before producing anything
    finished: bool
    finish_reason: str | None = None  # "stop", "length" or "error"
    error: str | None = None
    cached_tokens: int = 0  # prompt tokens that came from the prefix cache


@dataclass
class SchedulerStats:
    prefill_batches: int = 0
    decode_batches: int = 0
    retracted: int = 0  # times a running request was sent back to wait for memory
    restarted_prefills: int = 0  # half-prefilled prompts that gave their pages back


class Scheduler:
    def __init__(self, config: SchedulerConfig, eos_token_ids: tuple[int, ...] = ()) -> None:
        self.config = config
        self.engine = Engine(config)
        self.eos_token_ids = eos_token_ids or self.engine.model_config.eos_token_ids
        self.table = TableManager(config.max_running_reqs)
        prefix_cache = create_prefix_cache(config.cache_type, self.engine.page_size)
        self.cache = CacheManager(self.engine.num_pages, self.engine.page_size,
                                  self.engine.page_table, prefix_cache)
        self.prefill = PrefillManager(self.cache, self.table)
        self.decode = DecodeManager(self.cache)
        self._early_outputs: list[TokenOutput] = []
        self._next_uid = 0
        self.stats = SchedulerStats()

    @property
    def has_work(self) -> bool:
        return self.prefill.runnable or self.decode.runnable or bool(self._early_outputs)

    def add_request(self, input_ids: list[int], params: SamplingParams,
                    uid: int | None = None) -> int:
        """Queue a request; problems with it are reported as an error output by the next step."""
        uid = self._new_uid() if uid is None else uid
        error = self._check_fits(len(input_ids), params)
        if error is not None:
            self._early_outputs.append(TokenOutput(uid, None, True, "error", error))
            return uid
        self.prefill.add(Req(uid=uid, input_ids=list(input_ids), sampling_params=params))
        return uid

    def _new_uid(self) -> int:
        self._next_uid += 1
        return self._next_uid - 1

    def _check_fits(self, prompt_len: int, params: SamplingParams) -> str | None:
        if prompt_len == 0:
            return "the prompt is empty"
        limit = self.engine.max_seq_len
        if prompt_len + params.max_tokens > limit:
            return (f"prompt ({prompt_len} tokens) + max_tokens ({params.max_tokens}) exceeds "
                    f"the context length of {limit} tokens")
        capacity = self.cache.capacity_tokens
        if prompt_len + params.max_tokens > capacity:
            return (f"the request needs up to {prompt_len + params.max_tokens} KV slots (prompt "
                    f"+ max_tokens) but the whole KV pool holds {capacity}")
        return None

    def abort(self, uid: int) -> bool:
        """Drop a request wherever it is and free its memory. True if it was found."""
        req = self.prefill.abort(uid) or self.decode.abort(uid)
        if req is None:
            return False
        if req.table_idx >= 0:
            self._free(req)
        return True

    def step(self) -> list[TokenOutput]:
        outputs, self._early_outputs = self._early_outputs, []
        batch = self._schedule()
        if batch is None:
            return outputs
        self._prepare(batch)
        if batch.is_prefill:
            self.stats.prefill_batches += 1
        else:
            self.stats.decode_batches += 1
        tokens = self.engine.forward_batch(batch).tolist()
        return outputs + self._process(batch, tokens)

    def _schedule(self) -> Batch | None:
        reserve = len(self.decode.running) * self.engine.page_size
        batch = self.prefill.schedule(self.config.max_prefill_length, reserve)
        if batch is not None:
            return batch
        return self.decode.schedule(self._retract, self._free_waiting)

    def _free_waiting(self) -> bool:
        """Release the pages of waiting requests that are part-way through a chunked prefill;
        they start their prompt again later. True if anything was freed."""
        holding = [r for r in self.prefill.waiting if r.table_idx >= 0]
        for req in holding:
            self._free(req)
            req.cached_len = 0
        self.stats.restarted_prefills += len(holding)
        return bool(holding)

    def _retract(self, req: Req) -> None:
        logger.info("KV pool full: request %d goes back to the waiting queue", req.uid)
        self.stats.retracted += 1
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
            outputs.append(TokenOutput(req.uid, token, reason is not None, reason,
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

    def flush_cache(self) -> None:
        """Drop every cached prefix (only when no request is running); pages return to free."""
        if self.decode.running or any(r.table_idx >= 0 for r in self.prefill.waiting):
            raise RuntimeError("cannot flush the prefix cache while requests hold pages")
        self.cache.flush()

    def shutdown(self) -> None:
        self.engine.shutdown()
