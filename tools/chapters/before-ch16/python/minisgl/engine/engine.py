"""The engine: the model, its paged KV pool, the attention backend and the sampler, together.

It knows nothing about requests arriving or finishing; the scheduler (chapter 8) decides what runs.
Given a prepared Batch it runs one forward pass and returns each request's next token.
"""

from __future__ import annotations

import torch

from minisgl.attention import create_attn_backend
from minisgl.core import Batch, Context, set_global_ctx
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache
from minisgl.models.config import ModelConfig
from minisgl.models.weight import load_model
from minisgl.utils import init_logger

from .config import EngineConfig
from .graph import GraphRunner, cuda_graph_sizes
from .sample import Sampler

logger = init_logger(__name__)


class Engine:
    def __init__(self, config: EngineConfig) -> None:
        self.config = config
        self.device = torch.device(config.device)
        self.model_config = ModelConfig.from_path(config.model_path)
        self.model = load_model(config.model_path, dtype=config.dtype, device=self.device,
                                dummy_weight=config.dummy_weight, config=self.model_config)
        mc = self.model_config
        self.page_size = config.page_size
        self.num_pages = config.num_pages or self._pages_that_fit()
        pool_pages = self.num_pages
        # >>> ch15
        # One more page than the scheduler knows of: the padding rows of a CUDA graph write their
        # K/V into its first slot, which no request ever owns.
        pool_pages += 1
        # <<< ch15
        logger.info("allocating the KV pool: %d pages x %d tokens (%.1f MiB) ...", self.num_pages,
                    self.page_size,
                    self.num_pages * self.page_size * self._kv_bytes_per_token() / 2**20)
        self.kv_cache = MHAKVCache(KVPoolConfig(
            num_layers=mc.num_layers, num_kv_heads=mc.num_kv_heads, head_dim=mc.head_dim,
            num_pages=pool_pages, page_size=self.page_size, dtype=config.dtype,
            device=self.device))
        self.max_seq_len = min(config.max_seq_len or mc.max_position_embeddings,
                               mc.max_position_embeddings)
        # page_table[row, position] = KV pool slot of that token (one row per running request)
        self.page_table = torch.zeros(config.max_running_reqs, self.max_seq_len,
                                      dtype=torch.int32, device=self.device)
        self.attn_backend = create_attn_backend(config.attention_backend, self.kv_cache,
                                                self.page_table, mc.num_qo_heads, mc.num_kv_heads)
        self.ctx = Context(attn_backend=self.attn_backend)
        set_global_ctx(self.ctx)
        self.sampler = Sampler(self.device, seed=config.seed)
        logger.info("engine ready: %s, %d KV pages x %d tokens (%.1f MiB)", mc.architecture,
                    self.num_pages, self.page_size,
                    self.num_pages * self.page_size * self._kv_bytes_per_token() / 2**20)
        # >>> ch15
        sizes = cuda_graph_sizes(config.cuda_graph_max_bs, config.max_running_reqs, self.device,
                                 self.attn_backend)
        self.graph_runner = GraphRunner(self.model, self.ctx, sizes,
                                        scratch_slot=self.num_pages * self.page_size,
                                        vocab_size=mc.vocab_size, device=self.device)
        self.graph_runner.capture()
        # <<< ch15

    def _kv_bytes_per_token(self) -> int:
        mc = self.model_config
        return 2 * mc.num_layers * mc.num_kv_heads * mc.head_dim * self.config.dtype.itemsize

    def _pages_that_fit(self) -> int:
        if self.device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(self.device)
            budget = int(free * self.config.memory_ratio)
        else:
            budget = self.config.cpu_kv_bytes
        pages = budget // (self._kv_bytes_per_token() * self.page_size)
        if pages < 1:
            raise RuntimeError("not enough memory for a single KV page")
        return pages

    @torch.inference_mode()
    def forward_batch(self, batch: Batch) -> torch.Tensor:
        """Run the model on the batch's new tokens; sample one token per request ([B], int64)."""
        set_global_ctx(self.ctx)  # the attention layers find this engine's batch through it
        params = [r.sampling_params for r in batch.reqs]
        # >>> ch15
        if self.graph_runner.can_run(batch):  # a decode batch small enough for a CUDA graph
            return self.sampler.sample(self.graph_runner.replay(batch), params)
        # <<< ch15
        self.attn_backend.prepare_metadata(batch)
        last = torch.tensor([r.extend_len for r in batch.reqs], device=self.device).cumsum(0) - 1
        with self.ctx.forward_batch(batch):
            logits = self.model.forward(batch.input_ids, batch.positions, output_indices=last)
        return self.sampler.sample(logits, params)

    def shutdown(self) -> None:
        set_global_ctx(None)
