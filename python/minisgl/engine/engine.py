"""The engine: the model, its paged KV pool, the attention backend and the sampler, together.

It knows nothing about requests arriving or finishing; the scheduler (chapter 8) decides what runs.
Given a prepared Batch it runs one forward pass and samples each request's next token.

Since chapter 16 nothing in a step waits for the GPU: the sampled tokens stay on the device, in a
buffer with one entry per page-table row (`next_tokens`) from which the next decode step takes its
inputs, and reach the host through a copy that is queued behind the step, with an event that says
when it has landed (`ForwardOutput`). The scheduler reads them one step later (overlap scheduling).

Everything the engine and the scheduler queue goes to one CUDA stream, in the order the host
issues it, and that order is what keeps memory safe: a page, a page-table row or a token-buffer
entry that the host hands to a new request is only written by work queued after every step that
still used it. (The official engine runs the forward pass on a second stream so that the input
copies of step N+1 can run beside step N; here the copies are a few kilobytes queued behind it.)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import accumulate

import torch

from minisgl.attention import create_attn_backend
from minisgl.core import Batch, Context, set_global_ctx
from minisgl.distributed import broadcast_int, get_tp_info, kv_heads_per_rank, min_over_ranks
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache
from minisgl.layers.cpu_pack import pack_linears
from minisgl.models.config import ModelConfig
from minisgl.models.weight import load_model
from minisgl.ops import hook
from minisgl.quant.model import pack_int8_linears
from minisgl.utils import init_logger
from minisgl.utils.cpu import describe_threads
from minisgl.utils.transfer import to_device

from .config import EngineConfig
from .cpu_step import CpuStepRunner
from .device_sample import DeviceSampler, TokenLogprobs
from .graph import GraphRunner, cuda_graph_sizes

logger = init_logger(__name__)


@dataclass
class ForwardOutput:
    """One step's sampled tokens: on the device now, on the host once `copied` has fired; and
    the log-probabilities of the requests that asked for them, copied the same way."""

    tokens: torch.Tensor  # [B] int64 on the device
    tokens_host: torch.Tensor  # [B] int64 on the host (pinned), filled by a queued copy
    copied: torch.cuda.Event | None  # None on a CPU, where the copy is already done
    logprobs: TokenLogprobs | None = None  # host tensors once `copied` has fired

    def tolist(self) -> list[int]:
        """Wait for this step's tokens (only for this step: later queued work keeps running)."""
        if self.copied is not None:
            self.copied.synchronize()
        return self.tokens_host.tolist()

    def logprob_lists(self) -> list[tuple[float, list[int], list[float]] | None]:
        """Per batch entry: (the token's log-prob, top ids, their log-probs), or None where the
        request did not ask. Call after tolist()."""
        out: list[tuple[float, list[int], list[float]] | None] = [None] * len(self.tokens_host)
        lp = self.logprobs
        if lp is None:
            return out
        chosen, ids, values = lp.chosen.tolist(), lp.top_ids.tolist(), lp.top_logprobs.tolist()
        for n, (at, k) in enumerate(zip(lp.index, lp.top_k)):
            out[at] = (chosen[n], ids[n][:k], values[n][:k])
        return out


@dataclass
class StepLogits:
    """A step's logits before sampling ([B, V], one row per request) and where its requests
    live: page-table rows (on the host and on the device) and the new tokens' positions."""

    logits: torch.Tensor
    rows_host: torch.Tensor
    rows: torch.Tensor
    new_positions: torch.Tensor
    # >>> ch25
    # The logits with each constrained request's forbidden tokens at -inf (chapter 25): sampling
    # reads these, log-probabilities the raw ones.
    masked: torch.Tensor | None = None
    # <<< ch25


def _pinned_copy(t: torch.Tensor) -> torch.Tensor:
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    return host.copy_(t, non_blocking=True)


class Engine:
    def __init__(self, config: EngineConfig, page_table: torch.Tensor | None = None) -> None:
        """page_table: another engine's table to use instead of a new one (a draft model's
        engine shares its target's, chapter 24); its pool must then have as many pages."""
        # >>> ch21
        if config.trace_dir and hook.installed is None:
            # The trace sits above the engine: whoever builds it starts the session first.
            logger.warning("trace_dir=%s but no trace session runs in this process (LLM starts "
                           "one): nothing will be recorded", config.trace_dir)
        # <<< ch21
        self.config = config
        self.device = torch.device(config.device)
        self.model_config = ModelConfig.from_path(config.model_path)
        self.model = load_model(config.model_path, dtype=config.dtype, device=self.device,
                                # >>> ch26
                                quantization=config.quantization,
                                # <<< ch26
                                dummy_weight=config.dummy_weight, config=self.model_config)
        # >>> ch20
        if self.device.type == "cpu":
            logger.info("CPU: %s weights and activations; %s", str(config.dtype)[6:],
                        describe_threads())
            # oneDNN reads packed weights about twice as fast (layers/cpu_pack.py)
            if packed := pack_linears(self.model):
                logger.info("packed %d linear weights for oneDNN", packed)
        # <<< ch20
        # >>> ch26
        if self.device.type == "cpu" and (packed := pack_int8_linears(self.model)):
            logger.info("packed %d int8 weights for fbgemm", packed)
        # <<< ch26
        mc = self.model_config
        # With tensor parallelism this rank holds (and caches K/V for) its own heads only.
        tp = get_tp_info()
        self.num_qo_heads = mc.num_qo_heads // tp.size
        self.num_kv_heads = kv_heads_per_rank(mc.num_kv_heads, tp.size)
        self.page_size = config.page_size
        self.num_pages = config.num_pages or self._pages_that_fit()
        pool_pages = self.num_pages
        # One more page than the scheduler knows of: the padding rows of a CUDA graph write their
        # K/V into its first slot, which no request ever owns.
        pool_pages += 1
        logger.info("allocating the KV pool: %d pages x %d tokens (%.1f MiB) ...", self.num_pages,
                    self.page_size,
                    self.num_pages * self.page_size * self._kv_bytes_per_token() / 2**20)
        self.kv_cache = MHAKVCache(KVPoolConfig(
            num_layers=mc.num_layers, num_kv_heads=self.num_kv_heads, head_dim=mc.head_dim,
            num_pages=pool_pages, page_size=self.page_size, dtype=config.dtype,
            device=self.device))
        self.max_seq_len = min(config.max_seq_len or mc.max_position_embeddings,
                               mc.max_position_embeddings)
        # page_table[row, position] = KV pool slot of that token (one row per running request)
        self.page_table = torch.zeros(config.max_running_reqs, self.max_seq_len,
                                      dtype=torch.int32, device=self.device)
        # >>> ch24
        if page_table is not None:
            self.page_table = page_table
        # <<< ch24
        self.attn_backend = create_attn_backend(config.attention_backend, self.kv_cache,
                                                self.page_table, self.num_qo_heads,
                                                self.num_kv_heads)
        self.ctx = Context(attn_backend=self.attn_backend)
        set_global_ctx(self.ctx)
        # Every rank samples, and all must draw the same tokens: rank 0's seed goes to all.
        seed = config.seed
        if tp.size > 1:
            seed = broadcast_int(random.SystemRandom().getrandbits(63) if seed is None else seed)
        self.sampler = DeviceSampler(config.max_running_reqs, self.device, seed=seed,
                                     vocab_size=mc.vocab_size)
        # next_tokens[row] = the token last sampled for the request in that page-table row: the
        # input of its next decode step, which therefore never waits for the host to know it.
        self.next_tokens = torch.zeros(config.max_running_reqs, dtype=torch.int64,
                                       device=self.device)
        logger.info("engine ready: %s, %d KV pages x %d tokens (%.1f MiB)", mc.architecture,
                    self.num_pages, self.page_size,
                    self.num_pages * self.page_size * self._kv_bytes_per_token() / 2**20)
        sizes = cuda_graph_sizes(config.cuda_graph_max_bs, config.max_running_reqs, self.device,
                                 self.attn_backend)
        self.graph_runner = GraphRunner(self.model, self.ctx, sizes,
                                        scratch_slot=self.num_pages * self.page_size,
                                        vocab_size=mc.vocab_size, device=self.device,
                                        logits_dtype=config.dtype)
        if sizes:  # graph.py logs the result; capture takes seconds per size
            logger.info("capturing CUDA graphs for %d decode batch sizes (1 to %d) ...",
                        len(sizes), max(sizes))
        self.graph_runner.capture()
        # >>> ch20
        # a CPU's decode step in one C++ call, where the model fits it (engine/cpu_step.py)
        self.cpu_step: CpuStepRunner | None = None
        if self.device.type == "cpu":
            self.cpu_step, why_not = CpuStepRunner.build(self.model, self.kv_cache,
                                                         self.page_table, self.attn_backend,
                                                         config.dtype)
            logger.info("CPU decode steps: %s", "one C++ call each" if self.cpu_step
                        else f"op by op ({why_not})")
        # <<< ch20

    def _kv_bytes_per_token(self) -> int:
        mc = self.model_config
        return 2 * mc.num_layers * self.num_kv_heads * mc.head_dim * self.config.dtype.itemsize

    def _pages_that_fit(self) -> int:
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = int(free * self.config.memory_ratio)
        else:
            budget = self.config.cpu_kv_bytes
        per_token = self._kv_bytes_per_token()
        # >>> ch24
        per_token += self.config.extra_kv_bytes_per_token  # a draft model's pool beside ours
        # <<< ch24
        pages = budget // (per_token * self.page_size)
        pages = min_over_ranks(pages)  # every rank must hold the same pages for the same tokens
        if pages < 1:
            raise RuntimeError("not enough memory for a single KV page")
        return pages

    @torch.inference_mode()
    def forward_batch(self, batch: Batch) -> ForwardOutput:
        """Run the model on the batch's new tokens and sample one token per request.

        The tokens go into next_tokens (at each request's page-table row) and start their way to
        the host; nothing here waits for the GPU."""
        return self.sample(self.run_model(batch))

    @torch.inference_mode()
    def run_model(self, batch: Batch) -> StepLogits:
        """The forward pass alone: each request's logits, queued, not sampled yet."""
        set_global_ctx(self.ctx)  # the attention layers find this engine's batch through it
        rows_host = torch.tensor([r.table_idx for r in batch.reqs], dtype=torch.int64)
        rows = to_device(rows_host, torch.int64, self.device)
        last = self._last_token_indices(batch)
        logits = self._logits(batch, last)
        # The position each new token will have: one past the last token computed for its request.
        return StepLogits(logits, rows_host, rows, batch.positions[last] + 1)

    @torch.inference_mode()
    def sample(self, step: StepLogits) -> ForwardOutput:
        """Sample the step's tokens, store them as the next inputs, and queue their copy."""
        logits = step.logits
        # >>> ch25
        if step.masked is not None:
            logits = step.masked
        # <<< ch25
        tokens = self.sampler.sample(logits, step.rows_host, step.rows, step.new_positions)
        self.next_tokens[step.rows] = tokens
        logprobs = self.sampler.logprobs(step.logits, step.rows_host, tokens)
        if self.device.type != "cuda":
            return ForwardOutput(tokens, tokens, None, logprobs)
        if logprobs is not None:
            logprobs.chosen, logprobs.top_ids, logprobs.top_logprobs = (
                _pinned_copy(t) for t in (logprobs.chosen, logprobs.top_ids,
                                          logprobs.top_logprobs))
        host = _pinned_copy(tokens)
        copied = torch.cuda.Event()
        copied.record()
        return ForwardOutput(tokens, host, copied, logprobs)

    def _logits(self, batch: Batch, last: torch.Tensor) -> torch.Tensor:
        if self.graph_runner.can_run(batch):  # a decode batch small enough for a CUDA graph
            return self.graph_runner.replay(batch)
        # >>> ch20
        if self.cpu_step is not None and self.cpu_step.can_run(batch):
            return self.cpu_step.run(batch, last)
        # <<< ch20
        self.attn_backend.prepare_metadata(batch)
        with self.ctx.forward_batch(batch):
            return self.model.forward(batch.input_ids, batch.positions,
                                      output_indices=last)

    # >>> ch24
    @torch.inference_mode()
    def forward_logits(self, batch: Batch, indices: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [len(indices), V] fp32 of the batch's tokens at `indices` (None: every new
        token), without sampling: speculative decoding (chapter 24) decides from them itself."""
        set_global_ctx(self.ctx)
        if indices is None:
            indices = torch.arange(len(batch.input_ids), device=self.device)
        return self._logits(batch, indices)

    # <<< ch24
    def _last_token_indices(self, batch: Batch) -> torch.Tensor:
        """Where each request's last new token sits in the batch's flat token list."""
        if not batch.is_prefill:
            return torch.arange(batch.size, device=self.device)  # one token per request
        ends = list(accumulate(r.extend_len for r in batch.reqs))
        return to_device([e - 1 for e in ends], torch.int64, self.device)

    def shutdown(self) -> None:
        set_global_ctx(None)
