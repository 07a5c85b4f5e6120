"""Chapter 6: the paged attention backend inside the model: prefill half a prompt, then the rest
against the cached half, and compare the logits with a full forward pass without any cache."""

from __future__ import annotations

import time

import torch

from minisgl.attention import create_attn_backend
from minisgl.core import Batch, Context, Req, SamplingParams, set_global_ctx
from minisgl.kvcache.mha_pool import KVPoolConfig, MHAKVCache
from minisgl.models.weight import load_model
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model


def run(model, req: Req) -> torch.Tensor:
    batch = Batch([req], "prefill")
    positions = torch.arange(req.cached_len, req.seq_len)
    batch.input_ids = torch.tensor(req.input_ids[req.cached_len : req.seq_len])
    batch.positions = positions
    batch.out_loc = page_table[req.table_idx, positions].long()
    ctx = Context(backend)
    set_global_ctx(ctx)
    backend.prepare_metadata(batch)
    with ctx.forward_batch(batch):
        return model.forward(batch.input_ids, batch.positions)


began = time.perf_counter()
path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
model, tokenizer = load_model(path), load_tokenizer(path)
mc = model.config
pool = MHAKVCache(KVPoolConfig(mc.num_layers, mc.num_kv_heads, mc.head_dim, num_pages=256,
                               page_size=1, dtype=torch.float32, device=torch.device("cpu")))
page_table = torch.zeros(1, 256, dtype=torch.int32)  # one request, up to 256 tokens
backend = create_attn_backend("torch", pool, page_table, mc.num_qo_heads, mc.num_kv_heads)

if __name__ == "__main__":
    ids = tokenizer.encode("The quick brown fox jumps over the lazy dog because it wanted to")
    page_table[0, : len(ids)] = torch.randperm(256)[: len(ids)].int()  # scattered slots
    half = len(ids) // 2
    req = Req(uid=0, input_ids=ids, sampling_params=SamplingParams(), table_idx=0, extend_len=half)
    first = run(model, req)
    req.cached_len, req.extend_len = half, len(ids) - half
    second = run(model, req)  # attends over the cached first half
    set_global_ctx(None)
    full = model.forward(torch.tensor(ids), torch.arange(len(ids)))  # no cache at all
    paged = torch.cat([first, second])
    print(f"{len(ids)} tokens: {half} prefilled, then {len(ids) - half} against the cached prefix")
    print(f"max |logit diff| vs one full forward: {(paged - full).abs().max():.2e}")
    print("next token:", repr(tokenizer.decode([int(paged[-1].argmax())])))
    print(f"took {time.perf_counter() - began:.1f} s")
