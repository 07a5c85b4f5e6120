"""Chapter 9: a long prompt is prefilled in chunks of --max-prefill-length tokens; the answer is
the same as with one big prefill."""

from __future__ import annotations

import time

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model

TEXT = " ".join(f"Fact {i}: the number {i} squared is {i * i}." for i in range(40))


def answer(path, ids: list[int], budget: int) -> tuple[list[int], int]:
    sched = Scheduler(SchedulerConfig(model_path=str(path), max_prefill_length=budget,
                                      page_size=16, num_pages=128))
    sched.add_request(ids, SamplingParams(max_tokens=16))
    tokens = []
    while sched.has_work:
        tokens += [o.token for o in sched.step()]
    batches = sched.stats().prefill_batches
    sched.shutdown()
    return tokens, batches


def main() -> None:
    path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    tokenizer = load_tokenizer(path)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": TEXT + " What is 7 squared?"}])
    chunked, n_chunked = answer(path, ids, budget=128)
    whole, n_whole = answer(path, ids, budget=8192)
    print(f"prompt of {len(ids)} tokens")
    print(f"budget 128:  {n_chunked} prefill batches -> "
          f"{tokenizer.decode(chunked, skip_special_tokens=True)!r}")
    print(f"budget 8192: {n_whole} prefill batch   -> "
          f"{tokenizer.decode(whole, skip_special_tokens=True)!r}")
    print("identical tokens:", chunked == whole)


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
