"""Chapter 24: speculative decoding on the bundled SmolLM2, on the CPU.

Generates the same prompts (code, a list, prose, Chinese) greedily three ways: plain decoding,
NGRAM speculation (guesses from each request's own tokens) and STANDALONE speculation with the
model as its own draft (every guess is what the target would pick, so all are accepted). It
checks that the tokens are the same every time and that every KV page is free or cached
afterwards, and prints how many tokens a speculative step gave each request on average, how
many forward passes of the target that saved, and the wall time of each run.
"""

from __future__ import annotations

import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPTS = [
    "def area(r):\n    return 3.14 * r * r\n\n\ndef perimeter(r):\n    return 2 * 3.14 * r\n\n\n"
    "def volume(r):\n",
    "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday, Monday, Tuesday,",
    "Once upon a time, in a small village by the sea, there lived",
    "春天来了，花开了。夏天来了，荷花开了。秋天来了，",
]
MAX_TOKENS = 32


def run(**speculative) -> tuple[list[dict], float, object]:
    llm = LLM(MODEL, device="cpu", dtype="float32", num_pages=2048, max_seq_len=512,
              **speculative)
    start = time.perf_counter()
    out = llm.generate(PROMPTS, SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True),
                       use_tqdm=False)
    seconds = time.perf_counter() - start
    llm.scheduler.check_integrity()
    stats = llm.scheduler.stats()
    assert stats.request_pages == 0, "a finished request still holds KV pages"
    llm.shutdown()
    return out, seconds, stats


def main() -> None:
    plain_out, plain_s, plain_stats = run()
    plain = [r["token_ids"] for r in plain_out]
    print(f"plain:      {plain_stats.decode_batches} decode steps, {plain_s:.2f} s")
    for name, kwargs in [("NGRAM", {"speculative_algorithm": "NGRAM"}),
                         ("STANDALONE", {"speculative_algorithm": "STANDALONE",
                                         "speculative_draft_model_path": MODEL})]:
        out, seconds, s = run(speculative_num_draft_tokens=4, **kwargs)
        tokens = [r["token_ids"] for r in out]
        accept_length = 1 + s.spec_accepted_tokens / s.spec_verify_reqs
        print(f"{name + ':':<11} {s.decode_batches} decode steps, {seconds:.2f} s; guesses "
              f"accepted {s.spec_accepted_tokens}/{s.spec_draft_tokens}, accept length "
              f"{accept_length:.2f}; same tokens as plain: {tokens == plain}")
        # each request's own steps: the batch runs until its slowest request is done
        print(f"{'':<11} speculative steps per request (plain: {MAX_TOKENS - 1} each): "
              f"{[r['spec_verify_ct'] for r in out]}")
        assert tokens == plain, f"{name} changed the output"
    print("first prompt's continuation:", repr(text_of(plain[0])))


def text_of(ids: list[int]) -> str:
    from minisgl.tokenizer import load_tokenizer
    from minisgl.utils.hf import resolve_model

    return load_tokenizer(resolve_model(MODEL)).decode(ids, skip_special_tokens=True)


if __name__ == "__main__":
    main()
