"""Chapter 7: the engine generates with its KV cache; the tokens equal naive recomputation,
at a fraction of the work."""

from __future__ import annotations

import time

import torch

from minisgl.core import Batch, Req, SamplingParams
from minisgl.engine.config import EngineConfig
from minisgl.engine.engine import Engine
from minisgl.engine.naive import naive_generate
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model


def step(engine: Engine, req: Req, phase: str) -> int:
    batch = Batch([req], phase)
    batch.positions = torch.arange(req.cached_len, req.seq_len)
    batch.input_ids = torch.tensor(req.input_ids[req.cached_len : req.seq_len])
    batch.out_loc = engine.page_table[req.table_idx, batch.positions].long()
    # tolist() works on what both engines return: chapter 7's a tensor of tokens, chapter
    # 16's a ForwardOutput whose tokens reach the host later (tolist waits for them).
    return engine.forward_batch(batch).tolist()[0]


def main() -> None:
    path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    tokenizer = load_tokenizer(path)
    engine = Engine(EngineConfig(model_path=str(path), num_pages=512, max_running_reqs=1))
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Name three colors."}])
    params = SamplingParams(max_tokens=24)
    engine.page_table[0, :512] = torch.arange(512, dtype=torch.int32)  # one request, slot = pos

    start = time.perf_counter()
    req = Req(uid=0, input_ids=list(prompt), sampling_params=params, table_idx=0,
              extend_len=len(prompt))
    out = [step(engine, req, "prefill")]
    while len(out) < params.max_tokens and out[-1] not in tokenizer.eos_token_ids:
        req.cached_len, req.extend_len = req.seq_len, 1
        req.input_ids.append(out[-1])
        out.append(step(engine, req, "decode"))
    cached_s = time.perf_counter() - start

    start = time.perf_counter()
    naive = naive_generate(engine.model, prompt, params, eos_token_ids=tokenizer.eos_token_ids)
    naive_s = time.perf_counter() - start
    print("answer:", tokenizer.decode(out, skip_special_tokens=True))
    print(f"engine with KV cache: {len(out)} tokens in {cached_s:.2f} s; naive: {naive_s:.2f} s")
    print("identical tokens:", out == naive)
    engine.shutdown()


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
