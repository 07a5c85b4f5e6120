"""Chapter 10: the radix cache. Requests that share a long system prompt reuse its KV pages."""

from __future__ import annotations

import time

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model

SYSTEM = ("You are a patient tutor. Explain every answer in simple words, give one short example, "
          "and keep it under three sentences. ") * 6
QUESTIONS = ["What is a prime number?", "What is gravity?", "What is a verb?"]


def main() -> None:
    path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    tokenizer = load_tokenizer(path)
    for cache in ("naive", "radix"):
        sched = Scheduler(SchedulerConfig(model_path=str(path), cache_type=cache, page_size=16,
                                          num_pages=256))
        start = time.perf_counter()
        for q in QUESTIONS:  # one after another, as a chat service would see them
            ids = tokenizer.apply_chat_template([{"role": "system", "content": SYSTEM},
                                                 {"role": "user", "content": q}])
            sched.add_request(ids, SamplingParams(max_tokens=8))
            while sched.has_work:
                for out in sched.step():
                    if out.finished:
                        print(f"  {cache}: prompt {len(ids)} tokens, {out.cached_tokens} from the "
                              "cache")
        print(f"{cache}: {time.perf_counter() - start:.2f} s; cached "
              f"{sched.cache.prefix_cache.evictable_size} tokens afterwards")
        sched.flush_cache()
        print(f"  after flush: free {sched.cache.free_tokens} of {sched.cache.capacity_tokens}")
        sched.shutdown()


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
