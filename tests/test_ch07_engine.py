"""Chapter 7: the engine's prefill + decode over the paged pool equals naive recomputation."""

from __future__ import annotations

import pytest
import torch

from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.engine.naive import naive_generate


@pytest.fixture(scope="module")
def engine(smollm2_dir):
    eng = Engine(EngineConfig(model_path=str(smollm2_dir), num_pages=64, page_size=4,
                              max_running_reqs=4, seed=0))
    yield eng
    eng.shutdown()


def _run(engine: Engine, batch: Batch) -> list[int]:
    """Fill the batch tensors by hand (the scheduler's job from chapter 8 on) and run it."""
    ids, pos, loc = [], [], []
    for r in batch.reqs:
        ids += r.input_ids[r.cached_len : r.seq_len]
        pos += list(range(r.cached_len, r.seq_len))
        loc += engine.page_table[r.table_idx, r.cached_len : r.seq_len].tolist()
    batch.input_ids, batch.positions = torch.tensor(ids), torch.tensor(pos)
    batch.out_loc = torch.tensor(loc)
    return engine.forward_batch(batch).tolist()


def test_two_requests_prefill_then_decode_match_naive(engine):
    prompts = [[1, 504, 3458, 282, 4649, 314, 2], [1, 9690, 28, 638, 359, 346, 47, 2, 198]]
    params = SamplingParams(max_tokens=12, ignore_eos=True)
    expected = [naive_generate(engine.model, p, params) for p in prompts]
    # scattered slots: request 0 uses pages 9.., request 1 pages 2.. in reverse order
    pages = [list(range(9, 16)), list(range(8, 1, -1))]
    reqs = []
    for row, (p, pg) in enumerate(zip(prompts, pages)):
        slots = (torch.tensor(pg)[:, None] * 4 + torch.arange(4)).flatten()
        engine.page_table[row, : len(slots)] = slots.int()
        reqs.append(Req(uid=row, input_ids=list(p), sampling_params=params, table_idx=row,
                        extend_len=len(p)))
    outputs = [[] for _ in prompts]
    tokens = _run(engine, Batch(reqs, "prefill"))
    for step in range(params.max_tokens):
        for i, (r, t) in enumerate(zip(reqs, tokens)):
            r.cached_len = r.seq_len
            r.input_ids.append(t)
            outputs[i].append(t)
            r.extend_len = 1
        if step + 1 == params.max_tokens:
            break
        tokens = _run(engine, Batch(reqs, "decode"))
    assert outputs == expected


def test_pool_is_sized_from_the_byte_budget(smollm2_dir):
    eng = Engine(EngineConfig(model_path=str(smollm2_dir), page_size=16, cpu_kv_bytes=64 << 20))
    per_token = 2 * 30 * 3 * 64 * 4  # K and V, 30 layers, 3 KV heads, head_dim 64, fp32
    assert eng.num_pages == (64 << 20) // (per_token * 16)
    eng.shutdown()


def test_the_kv_pool_is_announced_before_it_is_allocated(smollm2_dir, monkeypatch, capfd):
    """A large pool takes seconds to allocate: its line comes first, "engine ready" after."""
    import logging

    from minisgl.engine import engine as engine_module

    monkeypatch.setattr(engine_module.logger, "level", logging.INFO)
    made = engine_module.MHAKVCache
    seen: list[str] = []

    def allocate(*args, **kwargs):
        seen.append(capfd.readouterr().err)
        return made(*args, **kwargs)

    monkeypatch.setattr(engine_module, "MHAKVCache", allocate)
    eng = Engine(EngineConfig(model_path=str(smollm2_dir), num_pages=32, page_size=4,
                              max_running_reqs=1))
    eng.shutdown()
    assert len(seen) == 1 and "allocating the KV pool: 32 pages x 4 tokens" in seen[0], seen
    assert "engine ready" in capfd.readouterr().err
