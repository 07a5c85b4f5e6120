"""Chapter 10: requests that share a prefix reuse its KV pages and still answer like HF."""

from __future__ import annotations

from test_ch08_scheduler import make_scheduler, run_all

from minisgl.core import SamplingParams

SYSTEM = ("You are a helpful assistant. Answer every question briefly and precisely, in one or "
          "two sentences, and never invent facts you are not sure about. ") * 4


def test_shared_prefix_is_reused_and_outputs_are_identical(smollm2_dir, hf_greedy):
    tok = hf_greedy.tokenizer
    questions = ["What is the capital of France?", "Who wrote Romeo and Juliet?",
                 "What does HTTP stand for?"]
    prompts = []
    for q in questions:
        text = tok.apply_chat_template([{"role": "system", "content": SYSTEM},
                                        {"role": "user", "content": q}],
                                       tokenize=False, add_generation_prompt=True)
        prompts.append(tok.encode(text, add_special_tokens=False))
    for page_size in (1, 16):
        sched = make_scheduler(smollm2_dir, cache_type="radix", page_size=page_size,
                               num_pages=4096 // page_size)
        first = sched.add_request(prompts[0], SamplingParams(max_tokens=12))
        tokens, finished = run_all(sched)
        assert finished[first].cached_tokens == 0
        rest = [sched.add_request(p, SamplingParams(max_tokens=12)) for p in prompts[1:]]
        more_tokens, more_finished = run_all(sched)
        tokens.update(more_tokens)
        for uid in rest:
            assert more_finished[uid].cached_tokens >= 100  # the long system prompt
        for uid, ids in zip([first, *rest], prompts):
            assert tokens[uid] == hf_greedy.generate(ids, 12)
        # the same prompt again: everything but the last prompt token comes from the cache
        again = sched.add_request(prompts[0], SamplingParams(max_tokens=12))
        again_tokens, again_finished = run_all(sched)
        aligned = (len(prompts[0]) - 1) // page_size * page_size
        assert again_finished[again].cached_tokens == aligned
        assert again_tokens[again] == tokens[first]
        sched.flush_cache()
        assert sched.cache.free_tokens == sched.cache.capacity_tokens
