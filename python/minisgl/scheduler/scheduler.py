"""The scheduler loop: choose a batch, run it, hand back one token per request.

Each `step()` launches one forward pass: a prefill batch when waiting requests can start (prefill
first keeps time-to-first-token low), otherwise a decode step over every running request. New
requests can be added between any two steps and join the running set as soon as their prefill is
launched (continuous batching). A long prompt prefilled in chunks (chapter 9) does not hold the
others: after each of its chunks the running requests decode one step.

Overlap scheduling (chapter 16). Reading a step's tokens on the host waits for the GPU, and while
the host then does its bookkeeping and builds the next batch the GPU would idle. So `step()`
launches step N first and only then reads and processes the tokens of step N-1, which the GPU
finished while step N was being built; the GPU always has the next step queued. This works
because the host knows everything about step N but the token values of step N-1: how long each
request is (a placeholder stands for each token not read yet), which finish by length, and where
step N's inputs are (on the device: `engine.next_tokens`). What it learns one step late is which
requests sampled an end-of-sequence token: they already run in step N, whose extra token for them
is dropped, and their memory is freed only when step N's tokens come back. Whatever would free
memory that the step in flight may still use (abort, retraction) first waits for that step and
processes it (`_drain`). MINISGL_DISABLE_OVERLAP_SCHEDULING=1 processes each step right after
launching it: the same code, one step at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from minisgl.core import MIN_TEMPERATURE, Batch, Req, SamplingParams, TokenOutput
from minisgl.engine.engine import Engine, ForwardOutput, StepLogits
from minisgl.env import load_env
from minisgl.grammar import GrammarManager, grammar_of
from minisgl.kvcache import create_prefix_cache
from minisgl.speculative import SpeculativeSettings, build_speculator, with_room_for_draft
from minisgl.utils import init_logger
from minisgl.utils.transfer import to_device

from .cache import CacheManager
from .config import SchedulerConfig
from .decode import DecodeManager
from .prefill import PrefillManager
from .table import TableManager

logger = init_logger(__name__)

NOT_READ = -1  # stands in input_ids for a token that is sampled but not read back yet


@dataclass
class LaunchedStep:
    """A step queued on the device whose tokens the host has not read yet."""

    batch: Batch
    output: ForwardOutput | None  # None until sampled (a grammar's mask first: chapter 25)
    # Per request, the index in its input_ids that the new token fills; -1 for a chunk of a
    # prompt that is not complete yet (its sampled token means nothing).
    token_index: list[int]
    logits: StepLogits | None = None  # what `output` is sampled from


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
    # >>> ch24
    # Speculative decoding: requests verified (one per request per step), guesses verified,
    # and of those accepted; mean acceptance length = 1 + accepted / verified requests.
    spec_verify_reqs: int = 0
    spec_draft_tokens: int = 0
    spec_accepted_tokens: int = 0
    # <<< ch24


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        # >>> ch24
        spec = SpeculativeSettings.resolve(config.speculative_algorithm,
                                           config.speculative_draft_model_path,
                                           config.speculative_num_draft_tokens,
                                           config.dummy_weight)
        config = with_room_for_draft(config, spec)  # a draft model's pool shares the KV budget
        # <<< ch24
        self.engine = Engine(config)
        self.eos_token_ids = self.engine.model_config.eos_token_ids
        self.table = TableManager(config.max_running_reqs)
        prefix_cache = create_prefix_cache(config.cache_type, self.engine.page_size)
        self.cache = CacheManager(self.engine.num_pages, self.engine.page_size,
                                  self.engine.page_table, prefix_cache)
        self.prefill = PrefillManager(self.cache, self.table)
        self.decode = DecodeManager(self.cache)
        self.overlap = not load_env().disable_overlap_scheduling
        # >>> ch24
        self.spec = build_speculator(config, spec, self.engine, self.cache)
        if self.spec is not None:
            # A speculative step must know its tokens before the next step can guess: it runs
            # one step at a time (overlap scheduling off), as SGLang's first versions did.
            self.overlap = False
        self._verify_ct: dict[int, int] = {}  # uid -> speculative steps it has had
        # <<< ch24
        # >>> ch25
        self.grammar: GrammarManager | None = None
        if config.grammar_backend != "none":
            # The vocabulary description is built when the first grammar comes (a GPU server
            # starts it at once: see scheduler/io.py).
            self.grammar = GrammarManager(config.model_path, self.engine.model_config.vocab_size,
                                          self.eos_token_ids)
        # <<< ch25
        self._in_flight: LaunchedStep | None = None
        # Requests that finished while the step in flight still computes them: their memory is
        # freed when that step's tokens come back.
        self._finished_in_flight: set[Req] = set()
        self._early_outputs: list[TokenOutput] = []  # outputs the next step() returns first
        self._next_uid = 0
        self._counts = SchedulerStats()  # only its counters are kept up to date
        self._decode_turn = False  # the next step decodes: a prompt is part-way (_schedule)

    @property
    def has_work(self) -> bool:
        busy = (self.prefill.runnable or self.decode.runnable or bool(self._early_outputs)
                or self._in_flight is not None)
        # >>> ch25
        busy = busy or (self.grammar is not None and bool(self.grammar.pending))
        # <<< ch25
        return busy

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
        req = Req(uid=uid, input_ids=list(input_ids), sampling_params=params)
        # >>> ch25
        if grammar_of(params) is not None:
            assert self.grammar is not None  # _check_request refused it otherwise
            self.grammar.submit(req)  # compiled on a thread; queued for prefill once ready
            return uid
        # <<< ch25
        self.prefill.add(req)
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
        # >>> ch25
        if grammar_of(params) is not None and self.grammar_refusal is not None:
            return self.grammar_refusal
        # <<< ch25
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
        if self._in_flight is not None and any(r.uid == uid for r in self._in_flight.batch.reqs):
            self._drain()  # the step in flight writes its K/V: let it finish before freeing
        req = self.prefill.abort(uid) or self.decode.abort(uid)
        # >>> ch25
        if self.grammar is not None:
            self.grammar.forget(uid)
            req = req or self.grammar.drop(uid)  # still waiting for its grammar
        # <<< ch25
        if req is None:
            return None
        # >>> ch24
        if self.spec is not None:
            self._verify_ct.pop(uid, None)
        # <<< ch24
        # A token the drain just read for it is not sent: the request ends with this abort.
        self._early_outputs = [out for out in self._early_outputs if out.uid != uid]
        if req.table_idx >= 0:
            self._free(req)
        return TokenOutput(uid=uid, finished=True, finish_reason="abort",
                           prompt_tokens=req.prompt_len, cached_tokens=req.cached_tokens)

    def step(self) -> list[TokenOutput]:
        """Launch the next step, then process the previous one (overlap) or this one."""
        # >>> ch25
        if self.grammar is not None and self.grammar.pending:
            self._admit_compiled()
        # <<< ch25
        batch = self._schedule()
        # >>> ch24
        if self.spec is not None and batch is not None and not batch.is_prefill:
            outputs, self._early_outputs = self._early_outputs + self._speculate(batch), []
            return outputs
        # <<< ch24
        launched = self._launch(batch)
        done = None
        if self.overlap:  # step N runs on the GPU while the host reads step N-1
            done, self._in_flight = self._in_flight, launched
        if done is not None:
            self._early_outputs += self._process(done)
        # >>> ch25
        if launched is not None and launched.output is None:
            self._sample_constrained(launched)  # step N-1's tokens are known by now
        # <<< ch25
        if not self.overlap and launched is not None:
            self._early_outputs += self._process(launched)
        if self._in_flight is not None and \
                len(self._finished_in_flight) == self._in_flight.batch.size:
            self._drain()  # every request of the step in flight has finished: free them now
        outputs, self._early_outputs = self._early_outputs, []
        return outputs

    def _drain(self) -> None:
        """Wait for the step in flight and process it now."""
        done, self._in_flight = self._in_flight, None
        if done is not None:
            self._early_outputs += self._process(done)

    def _schedule(self) -> Batch | None:
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
        reserve = len(self.decode.running) * self.engine.page_size
        batch = self.prefill.schedule(self.config.max_prefill_length, reserve)
        if batch is not None:
            last = batch.reqs[-1]  # only the last request of a batch can be chunked
            self._decode_turn = last.seq_len < len(last.input_ids)
            return batch
        return self._schedule_decode()

    def _schedule_decode(self) -> Batch | None:
        """Every running request gets a slot for its next token. When the pool runs short, the
        step in flight is processed first (finished requests give their pages back), then
        half-prefilled prompts give their pages back, then the newest running request."""
        while self.decode.running and not self.decode.allocate_next_slots():
            if self._in_flight is not None:
                self._drain()
                continue
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

    def _launch(self, batch: Batch | None) -> LaunchedStep | None:
        """Queue the batch's forward pass and move each request's host view past it."""
        if batch is None:
            return None
        self._prepare(batch)
        if batch.is_prefill:
            self._counts.prefill_batches += 1
        else:
            self._counts.decode_batches += 1
        output, logits = self._run(batch)
        # This loop and the one in _process run for every request at every step: at batch 256
        # they are most of the host's work per step, so they read each attribute once.
        prefill = batch.is_prefill
        token_index = []
        for req in batch.reqs:
            ids = req.input_ids
            n = len(ids)
            req.cached_len += req.extend_len
            req.extend_len = 0
            if req.cached_len < n:
                token_index.append(-1)  # a chunk of a longer prompt
                continue
            token_index.append(n)
            ids.append(NOT_READ)
            done = n + 1 - req.prompt_len >= req.sampling_params.max_tokens  # outputs so far
            if prefill and not done:
                self.decode.add(req)  # its first decode step may be the very next one
            elif not prefill and done:
                self.decode.remove(req)  # finished by length: known before its token is read
        return LaunchedStep(batch, output, token_index, logits)

    def _run(self, batch: Batch) -> tuple[ForwardOutput | None, StepLogits | None]:
        """Queue the batch's forward pass and its sampling: (the sampled step, None). A batch
        with constrained requests (chapter 25) is sampled later, in step(), once the previous
        step's tokens are read: (None, its logits)."""
        # >>> ch25
        if self.grammar is not None and self.grammar.constrains(batch.reqs):
            return None, self.engine.run_model(batch)
        # <<< ch25
        return self.engine.forward_batch(batch), None

    def _prepare(self, batch: Batch) -> None:
        """The batch's device tensors, queued without waiting (see utils/transfer.py)."""
        device = self.engine.device
        if batch.is_prefill:
            ids: list[int] = []
            positions: list[int] = []
            token_rows: list[int] = []
            for req in batch.reqs:
                ids += req.input_ids[req.cached_len : req.seq_len]
                positions += range(req.cached_len, req.seq_len)
                token_rows += [req.table_idx] * req.extend_len
            batch.input_ids = to_device(ids, torch.int64, device)
            batch.positions = to_device(positions, torch.int64, device)
            rows = to_device(token_rows, torch.int64, device)
            self.engine.sampler.set_rows([r.table_idx for r in batch.reqs],
                                         [r.sampling_params for r in batch.reqs],
                                         [r.uid for r in batch.reqs])
            # Penalties count the tokens seen so far; a prefill (re)starts the count, from the
            # prompt and, for a retracted request, what it had generated (all read by now).
            penalized = [r for r in batch.reqs if r.sampling_params.has_penalties]
            if penalized:
                self.engine.sampler.reset_counts([r.table_idx for r in penalized],
                                                 [r.input_ids[: r.prompt_len] for r in penalized],
                                                 [r.output_ids for r in penalized])
        else:
            rows = to_device([r.table_idx for r in batch.reqs], torch.int64, device)
            batch.positions = to_device([r.cached_len for r in batch.reqs], torch.int64, device)
            # The last token of each request, sampled by an earlier step: read on the device,
            # so this step can be queued before the host has seen it.
            batch.input_ids = self.engine.next_tokens[rows]
        batch.out_loc = self.engine.page_table[rows, batch.positions].long()

    def _process(self, done: LaunchedStep) -> list[TokenOutput]:
        """Read a step's tokens (waiting for that step only), emit them, retire finished ones."""
        assert done.output is not None
        tokens = done.output.tolist()
        logprobs = done.output.logprob_lists()
        stale, self._finished_in_flight = self._finished_in_flight, set()
        eos = self.eos_token_ids
        prefill = done.batch.is_prefill
        outputs = []
        for req, token, at, lp in zip(done.batch.reqs, tokens, done.token_index, logprobs):
            if at < 0 or (stale and req in stale):
                continue  # a prompt chunk, or an extra token after the request finished
            req.input_ids[at] = token
            params = req.sampling_params
            if token in eos and not params.ignore_eos:
                reason: str | None = "stop"
            elif at + 1 - req.prompt_len >= params.max_tokens:
                reason = "length"
            else:
                reason = None
            # >>> ch25
            if self.grammar is not None and self.grammar.accept(req, token):
                reason = "stop"  # the grammar is complete
            # <<< ch25
            chosen, top_ids, top_logprobs = lp if lp is not None else (None, None, None)
            outputs.append(TokenOutput(uid=req.uid, token=token, finished=reason is not None,
                                       finish_reason=reason, prompt_tokens=req.prompt_len,
                                       cached_tokens=req.cached_tokens, logprob=chosen,
                                       top_ids=top_ids, top_logprobs=top_logprobs))
            if reason is not None:
                self._retire(req, at)
            elif prefill:
                self.cache.release(req, finished=False)  # share the prompt with later requests
        for req in stale:
            self._free(req)
        return outputs

    def _retire(self, req: Req, at: int) -> None:
        """A request whose token at index `at` ended it: drop what a later step sampled for it,
        and free its memory now, or once the step in flight that still computes it is back."""
        del req.input_ids[at + 1 :]
        # >>> ch25
        if self.grammar is not None:
            self.grammar.forget(req.uid)
        # <<< ch25
        if req in self.decode.running:
            self.decode.remove(req)
        if self._in_flight is not None and req in self._in_flight.batch.reqs:
            self._finished_in_flight.add(req)
        else:
            self._free(req)

    def _free(self, req: Req) -> None:
        # >>> ch24
        if self.spec is not None:
            self.spec.forget(req)  # the draft model's record of the request's K/V
        # <<< ch24
        self.cache.release(req, finished=True)
        self.table.free(req.table_idx)
        req.table_idx = -1

    # >>> ch24
    def _speculate(self, batch: Batch) -> list[TokenOutput]:
        """A decode step with guesses (speculative/): each request gets 1 to k+1 tokens, which
        go out as one TokenOutput each, as if plain steps had made them."""
        self._counts.decode_batches += 1
        result = self.spec.step(batch.reqs)
        self._counts.spec_verify_reqs += batch.size
        self._counts.spec_draft_tokens += result.drafted
        self._counts.spec_accepted_tokens += result.accepted
        eos = self.eos_token_ids
        outputs = []
        for req, new, kept, lp in zip(batch.reqs, result.tokens, result.per_request_accepted,
                                      result.logprobs):
            # The verification computed K/V for the last token and the kept guesses.
            computed = len(req.input_ids) + kept
            verify_ct = self._verify_ct[req.uid] = self._verify_ct.get(req.uid, 0) + 1
            params = req.sampling_params
            reason: str | None = None
            for token in new:
                req.input_ids.append(token)
                if token in eos and not params.ignore_eos:
                    reason = "stop"
                elif len(req.input_ids) - req.prompt_len >= params.max_tokens:
                    reason = "length"
                chosen, top_ids, top_logprobs = lp if lp is not None else (None, None, None)
                outputs.append(TokenOutput(
                    uid=req.uid, token=token, finished=reason is not None,
                    finish_reason=reason, prompt_tokens=req.prompt_len,
                    cached_tokens=req.cached_tokens, logprob=chosen, top_ids=top_ids,
                    top_logprobs=top_logprobs, spec_verify_ct=verify_ct))
                if reason is not None:
                    break
            # K/V exist for every token but the newest; fewer when a stop cut the tokens short
            req.cached_len, req.extend_len = min(computed, len(req.input_ids)), 0
            if reason is not None:
                del self._verify_ct[req.uid]
                self._retire(req, len(req.input_ids) - 1)
        return outputs

    # <<< ch24
    # >>> ch25
    @property
    def grammar_refusal(self) -> str | None:
        """Why this scheduler runs no grammars, or None when it does (the API server asks, to
        answer such requests with a 400)."""
        if self.grammar is None:
            return "structured output is off on this server (--grammar-backend none)"
        if self.spec is not None:
            # A guess would have to be checked against the grammar too, and a rejected one
            # rolled back in the matcher; this chapter keeps the two apart.
            return "structured output cannot be combined with speculative decoding here"
        return None

    def _admit_compiled(self) -> None:
        """Queue the requests whose grammar has compiled; fail those whose grammar did not.
        With nothing else to run, wait a little for a compile rather than spin."""
        assert self.grammar is not None
        idle = not (self.prefill.runnable or self.decode.runnable or self._in_flight)
        for req, error in self.grammar.ready(block=idle):
            if error is None:
                self.prefill.add(req)
            else:
                self._early_outputs.append(TokenOutput(
                    uid=req.uid, finished=True, finish_reason="error", error=error,
                    prompt_tokens=req.prompt_len))

    def _sample_constrained(self, launched: LaunchedStep) -> None:
        """Sample a step that holds constrained requests, their forbidden tokens masked. Rows
        whose token will be dropped (a prompt chunk, a request that finished in the step just
        read) keep their logits."""
        assert self.grammar is not None and launched.logits is not None
        batch = launched.batch
        skip = {r for r, at in zip(batch.reqs, launched.token_index) if at < 0}
        skip |= self._finished_in_flight & set(batch.reqs)
        logits = launched.logits
        keep_raw = any(r.sampling_params.logprobs is not None for r in batch.reqs)
        logits.masked = self.grammar.mask_logits(logits.logits, batch.reqs, skip, keep_raw)
        launched.output = self.engine.sample(logits)

    # <<< ch25
    def check_integrity(self) -> None:
        """Every page is free, cached, or held by one live request; requests that finished by
        length in the step in flight hold theirs until it is read."""
        live = [*self.decode.running, *self.prefill.waiting]
        if self._in_flight is not None:
            live += self._in_flight.batch.reqs
        holding = {id(r): r for r in live if r.table_idx >= 0}
        self.cache.check_integrity(list(holding.values()))

    def stats(self) -> SchedulerStats:
        return replace(self._counts, **self.cache.page_counts(),
                       running_requests=len(self.decode.running),
                       waiting_requests=len(self.prefill.waiting))

    def flush_cache(self) -> None:
        """Drop every cached prefix (only when no request is running); pages return to free."""
        self._drain()
        if self.decode.running or any(r.table_idx >= 0 for r in self.prefill.waiting):
            raise RuntimeError("cannot flush the prefix cache while requests hold pages")
        self.cache.flush()

    def shutdown(self) -> None:
        self._drain()
        # >>> ch25
        if self.grammar is not None:
            self.grammar.shutdown()
        # <<< ch25
        self.engine.shutdown()
