"""Chapter 8: continuous batching. Requests of different lengths share decode steps; a request
added later joins the running batch; each leaves as soon as it is done."""

from __future__ import annotations

import time

from minisgl.core import SamplingParams
from minisgl.scheduler import Scheduler, SchedulerConfig
from minisgl.tokenizer import load_tokenizer
from minisgl.utils.hf import resolve_model

QUESTIONS = ["What is 2 + 2?", "Name a fruit.", "Say hello in French.", "What color is grass?"]


def main() -> None:
    path = resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct")
    tokenizer = load_tokenizer(path)
    sched = Scheduler(SchedulerConfig(model_path=str(path), cache_type="naive", page_size=4,
                                      num_pages=256))
    chat = [tokenizer.apply_chat_template([{"role": "user", "content": q}]) for q in QUESTIONS]
    for ids, n in zip(chat[:3], (6, 12, 18)):
        sched.add_request(ids, SamplingParams(max_tokens=n))
    answers: dict[int, list[int]] = {}
    step = 0
    while sched.has_work:
        step += 1
        if step == 4:
            sched.add_request(chat[3], SamplingParams(max_tokens=8))
            print("step 4: a fourth request arrives")
        outs = sched.step()
        done = [o.uid for o in outs if o.finished]
        print(f"step {step:2d}: batch of {len(outs)} -> uids {[o.uid for o in outs]}"
              + (f", finished {done}" if done else ""))
        for o in outs:
            answers.setdefault(o.uid, []).append(o.token)
    for uid, tokens in sorted(answers.items()):
        print(f"[{uid}] {QUESTIONS[uid]} -> {tokenizer.decode(tokens, skip_special_tokens=True)!r}")
    print(f"prefill batches {sched.stats().prefill_batches}, decode batches "
          f"{sched.stats().decode_batches}; free KV slots {sched.cache.free_tokens} of "
          f"{sched.cache.capacity_tokens}")
    sched.shutdown()


if __name__ == "__main__":
    began = time.perf_counter()
    main()
    print(f"took {time.perf_counter() - began:.1f} s")
