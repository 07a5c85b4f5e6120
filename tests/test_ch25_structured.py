"""Chapter 25: structured output. Grammars (JSON Schema, regex, EBNF) compiled with XGrammar, the
token bitmask applied before sampling, under overlap scheduling, and through the HTTP API.

References are external: answers are checked with the `jsonschema` package and `re.fullmatch`,
the bitmask op against a plain Python loop, unconstrained answers against the same requests run
without the constrained ones beside them.
"""

from __future__ import annotations

import json
import random
import re

import jsonschema
import pytest
import torch

from minisgl.core import SamplingParams
from minisgl.grammar import GrammarError, GrammarKey, check_grammar, grammar_of
from minisgl.grammar.compiler import GrammarCompiler
from minisgl.grammar.spec import nesting, readable
from minisgl.ops.bitmask import apply_token_bitmask_torch, apply_token_bitmask_xgrammar

# Every schema is bounded (strings with maxLength, arrays with maxItems, numbers with bounds), so
# an answer always closes within max_tokens, whatever the temperature draws.
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string", "enum": ["Paris", "Lagos", "Lima"]},
                           "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"], "additionalProperties": False},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "blue", "green"]},
                 "minItems": 1, "maxItems": 3},
    },
    "required": ["name", "age", "address", "tags"],
    "additionalProperties": False,
}
ORDER = {
    "type": "object",
    "properties": {
        "items": {"type": "array", "minItems": 2, "maxItems": 4, "items": {
            "type": "object",
            "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 99},
                           "price": {"type": "number", "minimum": 0, "maximum": 50},
                           "paid": {"type": "boolean"}},
            "required": ["id", "price", "paid"], "additionalProperties": False}},
        "level": {"type": "string", "enum": ["low", "mid", "high"]},
    },
    "required": ["items", "level"],
    "additionalProperties": False,
}
SCHEMAS = {"person": PERSON, "order": ORDER}
PHONE = r"\(\d{3}\) \d{3}-\d{4}"
YES_NO = 'root ::= ("yes" | "no") ", because " [a-z ]{1,20} "."'
FREE_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time,",
                "The three primary colours are", "import numpy as np\n", "My favourite fruit is",
                "1, 2, 3, 4,", "The weather today"]


# ----------------------------------------------------------------------------- the bitmask op


def brute_force_mask(logits: torch.Tensor, bitmask: torch.Tensor) -> torch.Tensor:
    out = logits.clone()
    words = bitmask.tolist()
    for b in range(logits.shape[0]):
        for t in range(logits.shape[1]):
            if not (words[b][t // 32] >> (t % 32)) & 1:
                out[b, t] = float("-inf")
    return out


@pytest.mark.parametrize("vocab", [1, 31, 32, 33, 100, 320])
def test_the_bitmask_op_masks_exactly_the_cleared_bits(vocab):
    gen = torch.Generator().manual_seed(vocab)
    logits = torch.randn(3, vocab, generator=gen)
    words = (vocab + 31) // 32
    bitmask = torch.randint(-2**31, 2**31 - 1, (3, words), dtype=torch.int32, generator=gen)
    bitmask[1] = -1  # a free row: every bit set
    want = brute_force_mask(logits, bitmask)
    for impl in (apply_token_bitmask_torch, apply_token_bitmask_xgrammar):
        got = logits.clone()
        impl(got, bitmask)
        assert torch.equal(got, want), impl.__name__
    assert torch.equal(want[1], logits[1])


def test_the_bitmask_op_keeps_bf16():
    logits = torch.randn(2, 70).bfloat16()
    bitmask = torch.tensor([[5, 0, 1], [-1, -1, -1]], dtype=torch.int32)
    apply_token_bitmask_torch(logits, bitmask)
    assert logits.dtype == torch.bfloat16
    assert torch.isfinite(logits[0]).nonzero().squeeze(1).tolist() == [0, 2, 64]
    assert torch.isfinite(logits[1]).all()


# ------------------------------------------------------------------ grammars and their checks


@pytest.mark.parametrize("key, message", [
    (GrammarKey("json_schema", "{not json"), "not valid JSON"),
    (GrammarKey("json_schema", "[1, 2]"), "is an object"),
    (GrammarKey("json_schema", '{"type": "objectt"}'), 'Unsupported type "objectt"'),
    (GrammarKey("json_schema", '{"type": "string", "pattern": "(ab"}'), "parenthesis"),
    (GrammarKey("regex", "(ab"), "parenthesis is not closed"),
    (GrammarKey("regex", "a{3,1}"), "Lower bound is larger"),
    (GrammarKey("ebnf", "root ::= missing_rule"), 'Rule "missing_rule" is not defined'),
    (GrammarKey("ebnf", "no rules here"), "invalid ebnf"),
])
def test_bad_grammars_are_refused_with_the_reason(key, message):
    with pytest.raises(GrammarError, match=re.escape(message)) as info:
        check_grammar(key)
    assert ".cc:" not in str(info.value)  # the C++ source location is cut off


def test_good_grammars_pass_and_the_params_name_one_at_most():
    for key in [GrammarKey("json_schema", json.dumps(PERSON)), GrammarKey("regex", PHONE),
                GrammarKey("ebnf", YES_NO), GrammarKey("json_schema", "true")]:
        check_grammar(key)
    assert grammar_of(SamplingParams(regex="a+")) == GrammarKey("regex", "a+")
    assert grammar_of(SamplingParams()) is None
    with pytest.raises(ValueError, match="at most one of json_schema, regex and ebnf"):
        SamplingParams(regex="a", ebnf='root ::= "a"')


def nested_schema(objects: int) -> str:
    schema: dict = {"type": "string"}
    for _ in range(objects):
        schema = {"type": "object", "properties": {"x": schema}}
    return json.dumps(schema)


def test_deep_schemas_are_refused_before_they_hold_the_compiler():
    assert nesting(json.loads(nested_schema(31))) == 63  # two levels per object, and one
    check_grammar(GrammarKey("json_schema", nested_schema(31)))
    with pytest.raises(GrammarError, match="nested 65 levels deep; at most 64 are allowed"):
        check_grammar(GrammarKey("json_schema", nested_schema(32)))
    with pytest.raises(GrammarError, match="nested too deeply to read"):
        check_grammar(GrammarKey("json_schema", "[" * 100000 + "]" * 100000))
    arrays = {"type": "array", "items": {"enum": [[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]}}
    check_grammar(GrammarKey("json_schema", json.dumps(arrays)))  # 25 levels: fine


def test_readable_drops_the_cpp_prefix():
    error = RuntimeError("[22:24:03] /project/cpp/regex_converter.cc:94: Regex parsing error")
    assert readable(error) == "Regex parsing error"


def test_compiled_grammars_are_cached_by_their_text(smollm2_dir):
    compiler = GrammarCompiler(str(smollm2_dir), 49152, (2,))
    try:
        first = compiler.compile(GrammarKey("regex", PHONE))
        again = compiler.compile(GrammarKey("regex", PHONE))
        other = compiler.compile(GrammarKey("regex", PHONE + "!"))
        assert again is first and other is not first
        assert first.result(timeout=60) is again.result()
        assert (compiler.compiles, compiler.hits) == (2, 1)
        # a grammar that parses but cannot compile is an error of its future, not of the loop
        broken = compiler.compile(GrammarKey("ebnf", "root ::= nowhere"))
        assert broken.exception(timeout=60) is not None
        assert compiler.compile(GrammarKey("ebnf", "root ::= nowhere")) is not broken  # retried
    finally:
        compiler.shutdown()


# ---------------------------------------------------------------- the scheduler, on SmolLM2


@pytest.fixture(scope="module")
def llm(smollm2_dir):
    from minisgl.llm import LLM

    engine = LLM(str(smollm2_dir), dtype="float32", device="cpu", num_pages=4096,
                 max_seq_len=1024, max_running_reqs=24)
    yield engine
    engine.shutdown()


def chat(llm, text: str) -> list[int]:
    return llm.tokenizer.apply_chat_template([{"role": "user", "content": text}])


def schema_params(name: str, temperature: float, seed: int, max_tokens: int = 160
                  ) -> SamplingParams:
    return SamplingParams(temperature=temperature, seed=seed, max_tokens=max_tokens,
                          json_schema=json.dumps(SCHEMAS[name]))


def test_answers_follow_their_schema_at_temperature_0_and_1(llm):
    jobs = [(name, t, 1) for name in SCHEMAS for t in (0.0, 1.0)]
    prompts = [chat(llm, f"Give me a {name} as JSON.") for name, _, _ in jobs]
    params = [schema_params(name, t, seed) for name, t, seed in jobs]
    results = llm.generate(prompts, params, use_tqdm=False)
    for (name, _, _), result in zip(jobs, results):
        assert result["finish_reason"] == "stop", result  # the grammar's end, not max_tokens
        jsonschema.validate(json.loads(result["text"]), SCHEMAS[name])
    llm.scheduler.check_integrity()


def test_regex_and_ebnf_match_whole_answers(llm):
    prompts = [chat(llm, "Write a phone number."), chat(llm, "Is the sky blue?")]
    params = [SamplingParams(temperature=1.0, seed=3, max_tokens=40, regex=PHONE),
              SamplingParams(temperature=1.0, seed=4, max_tokens=60, ebnf=YES_NO)]
    phone, answer = llm.generate(prompts, params, use_tqdm=False)
    assert re.fullmatch(PHONE, phone["text"]) and phone["finish_reason"] == "stop", phone
    assert re.fullmatch(r"(yes|no), because [a-z ]{1,20}\.", answer["text"]), answer


def test_max_tokens_inside_a_grammar_says_length(llm):
    [result] = llm.generate([chat(llm, "A person as JSON")],
                            schema_params("person", 0.0, 0, max_tokens=5), use_tqdm=False)
    assert result["finish_reason"] == "length" and len(result["token_ids"]) == 5
    assert result["text"].startswith('{"name": "')


def mixed_batch(llm) -> tuple[list, list[SamplingParams]]:
    """16 requests, constrained and free ones interleaved, free ones greedy."""
    rng = random.Random(25)
    prompts, params = [], []
    for i in range(8):
        name = rng.choice(list(SCHEMAS))
        prompts += [chat(llm, f"Describe {name} number {i} as JSON."), FREE_PROMPTS[i]]
        params += [schema_params(name, rng.choice([0.0, 1.0]), seed=i),
                   SamplingParams(temperature=0.0, max_tokens=24)]
    return prompts, params


def test_constrained_and_free_requests_share_a_batch(llm, smollm2_dir, monkeypatch):
    prompts, params = mixed_batch(llm)
    mixed = llm.generate(prompts, params, use_tqdm=False)
    alone = llm.generate(prompts[1::2], params[1::2], use_tqdm=False)
    for result, name in zip(mixed[0::2], [json.loads(p.json_schema) for p in params[0::2]]):
        jsonschema.validate(json.loads(result["text"]), name)
    assert [r["token_ids"] for r in mixed[1::2]] == [r["token_ids"] for r in alone]
    llm.scheduler.check_integrity()

    # One step at a time (no overlap), the mask is never late: the same tokens, every one.
    from minisgl.llm import LLM

    monkeypatch.setenv("MINISGL_DISABLE_OVERLAP_SCHEDULING", "1")
    serial = LLM(str(smollm2_dir), dtype="float32", device="cpu", num_pages=4096,
                 max_seq_len=1024, max_running_reqs=24)
    try:
        assert not serial.scheduler.overlap and llm.scheduler.overlap
        again = serial.generate(prompts, params, use_tqdm=False)
    finally:
        serial.shutdown()
    assert [r["token_ids"] for r in again] == [r["token_ids"] for r in mixed]


def test_a_request_waiting_for_its_grammar_can_be_aborted(llm):
    sched = llm.scheduler
    ids = chat(llm, "JSON please")
    uid = sched.add_request(ids, schema_params("order", 0.0, 0))
    assert sched.grammar is not None and [p.req.uid for p in sched.grammar.pending] == [uid]
    out = sched.abort(uid)
    assert out is not None and out.finish_reason == "abort"
    assert not sched.grammar.pending and uid not in sched.grammar.matchers
    assert not sched.has_work
    sched.check_integrity()


def test_chunked_prefill_and_retraction_keep_the_grammar(smollm2_dir):
    """A long prompt in 64-token chunks, and a pool so small that running requests are sent
    back to wait (retracted) and prefilled again: the matcher keeps what it accepted."""
    from minisgl.llm import LLM

    small = LLM(str(smollm2_dir), dtype="float32", device="cpu", num_pages=260,
                max_seq_len=256, max_running_reqs=8, max_prefill_length=64)
    try:
        long_prompt = chat(small, "Describe an order as JSON. " * 12)
        prompts = [long_prompt] + [chat(small, f"Order {i} as JSON:") for i in range(3)]
        params = [schema_params("order", 1.0, seed=i, max_tokens=150) for i in range(4)]
        results = small.generate(prompts, params, use_tqdm=False)
        assert small.scheduler.stats().retracted > 0
        for result in results:
            assert result["finish_reason"] == "stop", result
            jsonschema.validate(json.loads(result["text"]), ORDER)
        small.scheduler.check_integrity()
    finally:
        small.shutdown()


@pytest.mark.parametrize("settings, message", [
    ({"grammar_backend": "none"}, "structured output is off"),
    ({"speculative_algorithm": "NGRAM"}, "cannot be combined with speculative decoding"),
])
def test_a_scheduler_that_runs_no_grammars_says_why(smollm2_dir, settings, message):
    from minisgl.scheduler import Scheduler, SchedulerConfig

    sched = Scheduler(SchedulerConfig(model_path=str(smollm2_dir), device="cpu", num_pages=64,
                                      max_seq_len=128, max_running_reqs=2, **settings))
    try:
        assert message in sched.grammar_refusal
        sched.add_request([1, 2, 3], SamplingParams(regex="a+"))
        [out] = sched.step()
        assert out.finish_reason == "error" and message in out.error
    finally:
        sched.shutdown()


def test_an_unknown_grammar_backend_is_refused(smollm2_dir):
    from minisgl.scheduler import SchedulerConfig

    with pytest.raises(ValueError, match="grammar_backend must be one of xgrammar, none"):
        SchedulerConfig(model_path=str(smollm2_dir), grammar_backend="outlines")


# -------------------------------------------------------------------------- the HTTP API


def test_the_openai_client_gets_schema_valid_answers(smollm2_server):
    from openai import OpenAI

    client = OpenAI(base_url=f"{smollm2_server.base_url}/v1", api_key="none")
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON,
                                                  "strict": True}}
    messages = [{"role": "user", "content": "Describe a person as JSON."}]
    for temperature in (0.0, 1.0):
        reply = client.chat.completions.create(model=smollm2_server.model_name,
                                               messages=messages, response_format=fmt,
                                               temperature=temperature, seed=7, max_tokens=160)
        choice = reply.choices[0]
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), PERSON)
        stream = client.chat.completions.create(model=smollm2_server.model_name,
                                                messages=messages, response_format=fmt,
                                                temperature=temperature, seed=7, max_tokens=160,
                                                stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == choice.message.content  # the same seed: the same answer, in pieces
    text = client.completions.create(model=smollm2_server.model_name, prompt="An order: ",
                                     max_tokens=160, temperature=1.0, seed=3,
                                     extra_body={"response_format": {
                                         "type": "json_schema",
                                         "json_schema": {"name": "order", "schema": ORDER}}})
    jsonschema.validate(json.loads(text.choices[0].text), ORDER)
    ask = [{"role": "user", "content": "Give a JSON object with the keys name and age."}]
    two = client.chat.completions.create(model=smollm2_server.model_name, messages=ask,
                                         response_format={"type": "json_object"}, n=2,
                                         temperature=1.0, seed=11, max_tokens=64,
                                         logprobs=True, top_logprobs=3)
    for choice in two.choices:
        assert choice.finish_reason == "stop"
        assert isinstance(json.loads(choice.message.content), dict)
        # log-probabilities come from the raw logits: finite, forbidden tokens included
        tops = [t.logprob for item in choice.logprobs.content for t in item.top_logprobs]
        assert len(tops) == 3 * len(choice.logprobs.content) and all(x > -1e9 for x in tops)


def test_generate_takes_regex_json_schema_and_ebnf(smollm2_server):
    def generate(**grammar):
        status, body = smollm2_server.post("/generate", {
            "text": "Answer: ", "sampling_params": {"max_new_tokens": 120, "temperature": 1.0,
                                                    "sampling_seed": 5, **grammar}})
        assert status == 200, body
        assert body["meta_info"]["finish_reason"]["type"] == "stop", body
        return body["text"]

    assert re.fullmatch(PHONE, generate(regex=PHONE))
    jsonschema.validate(json.loads(generate(json_schema=json.dumps(ORDER))), ORDER)
    assert re.fullmatch(r"(yes|no), because [a-z ]{1,20}\.", generate(ebnf=YES_NO))


@pytest.mark.parametrize("path, body, param, message", [
    ("/v1/chat/completions", {"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "objectt"}}}}, "response_format", "Unsupported type"),
    ("/v1/chat/completions", {"response_format": {"type": "json_schema"}},
     "response_format.json_schema", "goes with type 'json_schema'"),
    ("/v1/chat/completions", {"response_format": {"type": "json_object", "json_schema": {
        "name": "x", "schema": {}}}}, "response_format.json_schema", "goes with type"),
    ("/v1/chat/completions", {"response_format": {"type": "yaml"}}, "response_format.type",
     "'response_format.type'"),
    ("/v1/completions", {"response_format": {"type": "json_schema", "json_schema": {
        "schema": {}}}}, "response_format.json_schema.name", "is required"),
    ("/generate", {"sampling_params": {"regex": "(ab"}}, "sampling_params.regex",
     "parenthesis is not closed"),
    ("/generate", {"sampling_params": {"json_schema": "{bad"}}, "sampling_params.json_schema",
     "not valid JSON"),
    ("/generate", {"sampling_params": {"regex": "a", "ebnf": 'root ::= "a"'}},
     "sampling_params.ebnf", "at most one"),
    ("/generate", {"sampling_params": {"regex": "a" * 40000}}, "sampling_params.regex",
     "at most 32768"),
])
def test_bad_grammars_are_a_400_naming_the_field(smollm2_server, path, body, param, message):
    if path == "/generate":
        body = {"text": "hi", **body}
    elif path == "/v1/completions":
        body = {"model": smollm2_server.model_name, "prompt": "hi", **body}
    else:
        body = {"model": smollm2_server.model_name,
                "messages": [{"role": "user", "content": "hi"}], **body}
    status, reply = smollm2_server.post(path, body)
    assert status == 400, reply
    assert reply["error"]["param"] == param and message in reply["error"]["message"], reply


def test_a_refusing_server_says_why_before_queueing():
    from minisgl.server.protocol import ApiError, ChatCompletionRequest, RequestLimits, parse_body

    body = json.dumps({"messages": [{"role": "user", "content": "hi"}],
                       "response_format": {"type": "json_object"}}).encode()
    limits = RequestLimits(100, 64, grammar_refusal="structured output is off on this server")
    with pytest.raises(ApiError, match="structured output is off") as info:
        parse_body(ChatCompletionRequest, body, limits)
    assert info.value.status == 400
    free = parse_body(ChatCompletionRequest, body, RequestLimits(100, 64))
    assert free.sampling_params(None).json_schema == '{"type": "object"}'


# ------------------------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_bitmask_op_on_the_gpu(dtype):
    gen = torch.Generator().manual_seed(7)
    vocab = 151936  # Qwen3's logits width
    logits = torch.randn(5, vocab, generator=gen).to("cuda", dtype)
    bitmask = torch.randint(-2**31, 2**31 - 1, (5, vocab // 32), dtype=torch.int32,
                            generator=gen).cuda()
    want, got = logits.clone(), logits.clone()
    apply_token_bitmask_torch(want, bitmask)
    apply_token_bitmask_xgrammar(got, bitmask)
    assert torch.equal(got, want)
    from minisgl import ops

    assert ops.apply_token_bitmask.kind_for(logits, bitmask) == "xgrammar"


@pytest.mark.gpu
def test_constrained_answers_on_the_gpu(qwen3_dir):
    """Qwen3-0.6B's shape with random bf16 weights, CUDA graphs and overlap scheduling: random
    weights write anything they can, so only the grammar keeps the answers in shape."""
    from minisgl.llm import LLM

    llm = LLM(str(qwen3_dir), dummy_weight=True, device="cuda", max_seq_len=1024)
    try:
        assert llm.scheduler.overlap
        prompts, params = [], []
        for i in range(16):
            prompts.append(f"Request {i}: answer in the right shape.")
            grammar = [{"json_schema": json.dumps(PERSON)}, {"regex": PHONE}, {"ebnf": YES_NO},
                       {}][i % 4]
            params.append(SamplingParams(temperature=1.0, seed=i, max_tokens=200, **grammar))
        results = llm.generate(prompts, params, use_tqdm=False)
        for p, result in zip(params, results):
            if p.json_schema is not None:
                assert result["finish_reason"] == "stop", result
                jsonschema.validate(json.loads(result["text"]), PERSON)
            elif p.regex is not None:
                assert re.fullmatch(PHONE, result["text"]), result
            elif p.ebnf is not None:
                assert re.fullmatch(r"(yes|no), because [a-z ]{1,20}\.", result["text"]), result
        llm.scheduler.check_integrity()
    finally:
        llm.shutdown()
