"""Chapter 25: structured output on the bundled SmolLM2, on the CPU.

Asks the same small model for a JSON object three times: free (it writes a Markdown fence and
whatever keys it likes), with OpenAI's json_object mode (any JSON object: valid so far, but
nothing makes it close), and with a JSON schema (the object must have these fields, of these
types and ranges, so it closes); then a regular expression and an EBNF grammar. Each constrained answer is checked: the JSON parses and follows its schema (the
checks of the schema are written out below, so this main needs nothing but minisgl), the regex
matches the whole answer. It prints the answers, how long the schema took to compile against the
vocabulary of 49,152 tokens, and the decode speed with and without the grammar.
"""

from __future__ import annotations

import json
import re
import time

from minisgl.core import SamplingParams
from minisgl.llm import LLM

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 16},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"type": "string", "enum": ["cat", "dog", "fish"]},
                 "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}
DATE = r"20[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
ANSWER = 'root ::= ("yes" | "no") " (" [0-9] "0% sure)"'


def follows_schema(value: object) -> bool:
    """SCHEMA's rules, written out."""
    return (isinstance(value, dict) and set(value) == {"name", "age", "pets"}
            and isinstance(value["name"], str) and len(value["name"]) <= 16
            and isinstance(value["age"], int) and 0 <= value["age"] <= 120
            and isinstance(value["pets"], list) and 1 <= len(value["pets"]) <= 3
            and all(p in ("cat", "dog", "fish") for p in value["pets"]))


def main() -> None:
    llm = LLM(MODEL, device="cpu", dtype="float32", num_pages=4096, max_seq_len=1024)
    ask = "Describe a person called Ada and her pets, in JSON."
    prompt = llm.tokenizer.apply_chat_template([{"role": "user", "content": ask}])

    params = {
        "free": SamplingParams(max_tokens=60),
        "json_object": SamplingParams(max_tokens=60, json_schema='{"type": "object"}'),
        "json_schema": SamplingParams(max_tokens=60, json_schema=json.dumps(SCHEMA)),
    }
    start = time.perf_counter()
    results = llm.generate([prompt] * 3, list(params.values()), use_tqdm=False)
    print(f"three answers in {time.perf_counter() - start:.2f} s (the schema's compile "
          f"included)")
    for (name, _), result in zip(params.items(), results):
        print(f"{name:>12} [{result['finish_reason']}]: {result['text']!r}")
    parsed = json.loads(results[2]["text"])
    assert follows_schema(parsed), parsed
    print("the json_schema answer parses and follows the schema:", parsed)
    # json_object keeps every prefix valid JSON, but nothing bounds the object: the model may
    # open keys until max_tokens (finish_reason "length"). Only a closed answer must parse.
    if results[1]["finish_reason"] == "stop":
        assert isinstance(json.loads(results[1]["text"]), dict)

    when = chat(llm, "When did the first person walk on the moon? Give a date.")
    sure = chat(llm, "Is water wet?")
    date, yes = llm.generate([when, sure], [SamplingParams(max_tokens=20, regex=DATE),
                                            SamplingParams(max_tokens=20, ebnf=ANSWER)],
                             use_tqdm=False)
    assert re.fullmatch(DATE, date["text"]), date
    assert re.fullmatch(r"(yes|no) \([0-9]0% sure\)", yes["text"]), yes
    print(f"regex {DATE}: {date['text']!r}")
    print(f"ebnf  {ANSWER}: {yes['text']!r}")

    compiler = llm.scheduler.grammar.compiler
    print(f"grammars compiled: {compiler.compiles}, cache hits: {compiler.hits}")
    free_ms = ms_per_token(llm, prompt, SamplingParams(max_tokens=33, ignore_eos=True))
    bound_ms = ms_per_token(llm, prompt, SamplingParams(
        max_tokens=33, json_schema=json.dumps({"type": "string", "minLength": 200})))
    print(f"decode: free {free_ms:.1f} ms/token, under a grammar {bound_ms:.1f} ms/token")
    llm.scheduler.check_integrity()
    llm.shutdown()


def chat(llm: LLM, text: str) -> list[int]:
    return llm.tokenizer.apply_chat_template([{"role": "user", "content": text}])


def ms_per_token(llm: LLM, prompt: list[int], params: SamplingParams) -> float:
    """(time for 1 + 32 tokens - time for 1 token) / 32: the prefill left out."""
    times = []
    for n in (1, params.max_tokens):
        one = SamplingParams(**{**params.__dict__, "max_tokens": n})
        start = time.perf_counter()
        [result] = llm.generate([prompt], one, use_tqdm=False)
        times.append(time.perf_counter() - start)
        assert len(result["token_ids"]) == n, result
    return (times[1] - times[0]) / (params.max_tokens - 1) * 1e3


if __name__ == "__main__":
    main()
