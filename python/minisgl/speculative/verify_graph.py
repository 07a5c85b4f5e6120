"""CUDA graphs for the forward passes of a speculative step (chapter 24).

Plain decode on a GPU replays one graph per step (chapter 15): hundreds of kernel launches for
the price of one. A speculative step's verification is an extend of k + 1 tokens per request,
and run eagerly it launches every kernel from Python, which at batch 1 costs several times the
decode step it is meant to replace. So it is recorded too, like decode but with q tokens per row:

- every row of the graph has exactly q tokens; a request with fewer guesses fills its row with
  padding tokens after its real ones, whose K/V go to the scratch slot and whose logits nobody
  reads (attention is causal: the real tokens before them never see them);
- the attention backend keeps the query offsets (0, q, 2q, ...) in a static buffer and each
  row's page-table row and length in two more (`init_verify_buffers` and the hooks after it);
- one graph per batch size of the engine's decode ladder, up to MAX_BS.

The draft model's catch-up (the one or two tokens verification added since its last step) uses
the same class with q = 2. A step whose rows do not fit (a first catch-up over a whole prompt, a
batch larger than MAX_BS, positions past the context) runs eagerly, as before.
"""

from __future__ import annotations

import time

import torch

from minisgl.core import Batch, Req, set_global_ctx
from minisgl.engine.engine import Engine
from minisgl.engine.graph import padded_size, padding_request
from minisgl.ops.hook import pause_recording, resume_recording
from minisgl.utils import init_logger
from minisgl.utils.transfer import copy_to_device, to_device

logger = init_logger(__name__)

# Speculation pays at small batches (a large batch already reads its weights for many tokens);
# the logits buffer is MAX_BS * q * vocab floats (5 * 32 rows of Qwen3's vocabulary: 97 MB).
MAX_BS = 32


class VerifyGraphs:
    def __init__(self, engine: Engine, q: int, max_bs: int = MAX_BS) -> None:
        self.engine = engine
        self.q = q
        backend = engine.attn_backend
        self.sizes = [s for s in engine.graph_runner.sizes if s <= max_bs]
        if not getattr(backend, "supports_verify_graph", False):
            self.sizes = []
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        if not self.sizes:
            return
        device, tokens = engine.device, self.sizes[-1] * q
        self.scratch_slot = engine.graph_runner.scratch_slot
        self.input_ids = torch.zeros(tokens, dtype=torch.int32, device=device)
        self.positions = torch.zeros(tokens, dtype=torch.int64, device=device)
        self.out_loc = torch.full((tokens,), self.scratch_slot, dtype=torch.int32, device=device)
        # in the model's dtype, as the decode graphs' logits (engine/graph.py)
        self.logits = torch.zeros(tokens, engine.model_config.vocab_size,
                                  dtype=engine.config.dtype, device=device)
        backend.init_verify_buffers(self.sizes[-1], q)
        self.batches: dict[int, Batch] = {}
        for bs in self.sizes:
            batch = Batch([padding_request()] * bs, "prefill")
            batch.input_ids, batch.positions = self.input_ids[: bs * q], self.positions[: bs * q]
            batch.out_loc = self.out_loc[: bs * q]
            backend.prepare_for_verify_capture(batch, q)
            self.batches[bs] = batch

    @torch.inference_mode()
    def _forward_padded(self, bs: int) -> None:
        batch = self.batches[bs]
        set_global_ctx(self.engine.ctx)  # the attention layers find this engine's batch there
        with self.engine.ctx.forward_batch(batch):
            self.logits[: bs * self.q].copy_(self.engine.model.forward(
                batch.input_ids, batch.positions, upcast=False))

    def capture(self) -> None:
        if not self.sizes:
            return
        pause_recording()  # a trace (chapter 21) records real steps, not these
        start = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        for bs in reversed(self.sizes):
            self._forward_padded(bs)  # compile and warm up outside the recording
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._forward_padded(bs)
            self.graphs[bs] = graph
        torch.cuda.synchronize(self.engine.device)
        resume_recording()
        logger.info("CUDA graphs: %d tokens per request for batch sizes %s in %.1f s", self.q,
                    ", ".join(map(str, self.sizes)), time.perf_counter() - start)

    def can_run(self, reqs: list[Req], tokens: list[list[int]]) -> bool:
        """Rows of at most q new tokens whose padded positions stay inside the context."""
        if not self.graphs or len(reqs) > self.sizes[-1]:
            return False
        limit = self.engine.max_seq_len
        return all(len(new) <= self.q and req.cached_len + self.q <= limit
                   for req, new in zip(reqs, tokens))

    @torch.inference_mode()
    def run(self, reqs: list[Req], tokens: list[list[int]]) -> torch.Tensor:
        """Logits [len(reqs) * q, V] of the new tokens tokens[i] of reqs[i] at positions
        cached_len, cached_len + 1, ...: request i's j-th token is row i * q + j (a view of the
        static buffer: read it before the next replay)."""
        q, n = self.q, len(reqs)
        bs = padded_size(self.sizes, n)
        assert bs is not None
        ids: list[int] = []
        positions: list[int] = []
        real: list[int] = []  # where the real tokens sit in the flat buffers
        rows: list[int] = []
        cols: list[int] = []
        for i, (req, new) in enumerate(zip(reqs, tokens)):
            ids += new + [0] * (q - len(new))
            positions += range(req.cached_len, req.cached_len + q)
            real += range(i * q, i * q + len(new))
            rows += [req.table_idx] * len(new)
            cols += range(req.cached_len, req.cached_len + len(new))
        device = self.engine.device
        copy_to_device(self.input_ids[: n * q], ids)
        copy_to_device(self.positions[: n * q], positions)
        # the real tokens' KV slots from the page table; padding tokens write the scratch slot
        self.out_loc[: bs * q].fill_(self.scratch_slot)
        slots = self.engine.page_table[to_device(rows, torch.int64, device),
                                       to_device(cols, torch.int64, device)]
        self.out_loc[to_device(real, torch.int64, device)] = slots
        self.engine.attn_backend.prepare_for_verify_replay(Batch(reqs, "prefill"), bs, q)
        self.graphs[bs].replay()
        return self.logits[: n * q]
