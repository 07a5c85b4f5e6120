"""CUDA graphs for decode (chapter 15): record a decode step once per batch size, then replay it.

A decode step of a small model is launch-bound on a fast GPU: hundreds of small kernels, each of
which costs the CPU a few microseconds to launch, often longer than the GPU needs to run it. A
CUDA graph records those launches once and replays them all with one call. A replay repeats
exactly what was recorded (the same kernels, grid sizes and memory addresses), which shapes
everything here:

- Inputs live in static buffers: token ids, positions, the KV slots the new K/V go to, and the
  attention backend's metadata. Each step copies its values in and then replays.
- One graph per batch size of a ladder (1, 2, 4, 8, 16, 24, ...). A batch runs in the graph of the
  next captured size; the rows it does not fill are padding that write their K/V into a scratch
  slot no request owns and attend over zero keys.
- All graphs share one memory pool (they never run at the same time). The largest is captured
  first, so the smaller ones reuse its memory.

Sampling stays outside the graph: it reads the real rows of the logits after the replay. The
logits stay in the model's dtype (bf16): the LM head rounds to it anyway, and an fp32 copy of
[256, 151936] logits would move 0.6 GB per step for nothing (the samplers upcast in registers).
"""

from __future__ import annotations

import time
from bisect import bisect_left

import torch

from minisgl.attention.base import BaseAttnBackend
from minisgl.core import Batch, Context, Req, SamplingParams
from minisgl.models.base import CausalLM
from minisgl.ops.hook import pause_recording, resume_recording, wants_eager
from minisgl.utils import init_logger

logger = init_logger(__name__)

DEFAULT_MAX_BS = 256  # cuda_graph_max_bs None: this, or max_running_reqs when that is smaller


def graph_batch_sizes(max_bs: int) -> list[int]:
    """The ladder of sizes to capture: 1, 2, 4, then every multiple of 8 below max_bs, then
    max_bs itself. Padding a batch of b costs at most 7 extra rows once b > 8."""
    if max_bs < 1:
        return []
    small = [s for s in (1, 2, 4) if s < max_bs]
    return small + list(range(8, max_bs, 8)) + [max_bs]


def padded_size(sizes: list[int], batch_size: int) -> int | None:
    """The smallest captured size that holds batch_size rows; None if none does."""
    i = bisect_left(sizes, batch_size)
    return sizes[i] if i < len(sizes) else None


def cuda_graph_sizes(max_bs: int | None, max_running_reqs: int, device: torch.device,
                     backend: BaseAttnBackend) -> list[int]:
    """The sizes to capture for this engine, or [] (with the reason in the log) for none."""
    if device.type != "cuda":
        return []  # CUDA graphs need a GPU; the CPU runs every step eagerly
    if max_bs == 0:
        logger.info("CUDA graphs are off (cuda_graph_max_bs=0): every step runs eagerly")
        return []
    if not backend.supports_cuda_graph:
        logger.info("CUDA graphs are off: the attention backend %s cannot be captured "
                    "(--attn triton or auto can)", type(backend).__name__)
        return []
    # A decode batch never has more rows than running requests (and the backends' workspaces
    # are sized for that many).
    return graph_batch_sizes(min(max_bs or DEFAULT_MAX_BS, max_running_reqs))


def padding_request() -> Req:
    """A row that fills a captured batch: no cached tokens and nothing new, so its attention
    length is 0. Its token (id 0 at position 0) goes through the model like any other."""
    return Req(uid=-1, input_ids=[0], sampling_params=SamplingParams(), table_idx=0)


class GraphRunner:
    """Static input buffers, one captured graph per ladder size, and the replay of a batch.

    `capture()` needs a GPU. Everything else (the buffers, loading a batch into them, the padded
    forward pass that capture records) also runs on a CPU, which is how the tests check it."""

    def __init__(self, model: CausalLM, ctx: Context, sizes: list[int], scratch_slot: int,
                 vocab_size: int, device: torch.device,
                 logits_dtype: torch.dtype = torch.float32) -> None:
        self.model = model
        self.ctx = ctx
        self.backend = ctx.attn_backend
        self.sizes = sizes
        self.scratch_slot = scratch_slot
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if not sizes:
            return
        max_bs = sizes[-1]
        # int32 token ids and KV slots: the CUDA kernels that read them (embedding, store_kv,
        # chapter 19) take int32, so int64 buffers would add a cast kernel to every layer's step.
        self.input_ids = torch.zeros(max_bs, dtype=torch.int32, device=device)
        self.positions = torch.zeros(max_bs, dtype=torch.int64, device=device)
        self.out_loc = torch.full((max_bs,), scratch_slot, dtype=torch.int32, device=device)
        self.logits = torch.zeros(max_bs, vocab_size, dtype=logits_dtype, device=device)
        self.backend.init_graph_buffers(max_bs)
        # The batch each graph is recorded with: padding rows over the static buffers, and the
        # backend's metadata pointing at its own static buffers.
        self.batches: dict[int, Batch] = {}
        for bs in sizes:
            batch = Batch([padding_request()] * bs, "decode")
            batch.input_ids, batch.positions = self.input_ids[:bs], self.positions[:bs]
            batch.out_loc = self.out_loc[:bs]
            self.backend.prepare_for_capture(batch)
            self.batches[bs] = batch

    def can_run(self, batch: Batch) -> bool:
        # >>> ch21
        if wants_eager(batch):  # a trace records this step outside the graph (ch. 21)
            return False
        # <<< ch21
        return not batch.is_prefill and bool(self.sizes) and batch.size <= self.sizes[-1]

    def load(self, batch: Batch) -> int:
        """Copy a decode batch into the static buffers; returns the captured size it runs in."""
        n = batch.size
        bs = padded_size(self.sizes, n)
        assert bs is not None and not batch.is_prefill
        self.input_ids[:n].copy_(batch.input_ids)
        self.positions[:n].copy_(batch.positions)
        self.out_loc[:n].copy_(batch.out_loc)
        # Padding rows keep whatever token and position an earlier batch left (both valid), but
        # their KV slot must be the scratch slot: an earlier batch left real requests' slots.
        self.out_loc[n:bs].fill_(self.scratch_slot)
        self.backend.prepare_for_replay(batch, bs)
        return bs

    @torch.inference_mode()
    def forward_padded(self, bs: int) -> None:
        """The step a graph records: the model over all bs rows, logits into the static buffer."""
        batch = self.batches[bs]
        with self.ctx.forward_batch(batch):
            self.logits[:bs].copy_(self.model.forward(batch.input_ids, batch.positions,
                                                      upcast=False))

    def capture(self) -> None:
        if not self.sizes:
            return
        # >>> ch21
        pause_recording()  # the warm-up and recorded batches are padding, not workloads
        # <<< ch21
        device = self.logits.device
        torch.cuda.synchronize(device)
        free_before = torch.cuda.mem_get_info(device)[0]
        start = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        for bs in reversed(self.sizes):
            # One eager run first: Triton compiles its kernels, the CUDA extension loads and
            # cuBLAS picks its algorithms, none of which may happen while a graph records.
            self.forward_padded(bs)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.forward_padded(bs)
            self.graphs[bs] = graph
        torch.cuda.synchronize(device)
        # >>> ch21
        resume_recording()
        # <<< ch21
        used = free_before - torch.cuda.mem_get_info(device)[0]
        logger.info("CUDA graphs: captured %d decode batch sizes (%s) in %.1f s, using %.0f MiB",
                    len(self.sizes), ", ".join(map(str, self.sizes)), time.perf_counter() - start,
                    used / 2**20)

    def replay(self, batch: Batch) -> torch.Tensor:
        """The logits of the batch's requests, [batch.size, vocab] in the buffer's dtype (a view
        of the static buffer: read it before the next replay)."""
        bs = self.load(batch)
        self.graphs[bs].replay()
        return self.logits[: batch.size]
