"""Chapter 14: request validation and stop strings, without a server."""

from __future__ import annotations

import json
import random

import pytest

from minisgl.server.guard import is_json, loopback_hosts
from minisgl.server.protocol import (
    MAX_MESSAGES,
    MAX_STOP_CHARS,
    MAX_STOPS,
    ApiError,
    ChatCompletionRequest,
    CompletionRequest,
    GenerateRequest,
    RequestLimits,
    parse_body,
)
from minisgl.server.stop import StopChecker


def test_valid_chat_body_parses_with_openai_defaults():
    req = parse_body(ChatCompletionRequest, b'{"model": "m", "messages": [{"role": "user", '
                                            b'"content": [{"type": "text", "text": "a"}, '
                                            b'{"type": "text", "text": "b"}]}], "seed": 3}')
    assert req.chat() == [{"role": "user", "content": "ab"}]
    assert (req.temperature, req.top_p, req.top_k, req.max_tokens) == (1.0, 1.0, -1, None)
    params = req.sampling_params(77)
    assert params.max_tokens == 77 and params.temperature == 1.0


def test_generate_has_sglang_defaults_and_completion_prompt_forms():
    params = parse_body(GenerateRequest, b'{"text": "x"}').to_sampling_params()
    assert (params.temperature, params.max_tokens, params.top_k, params.top_p) == \
        (1.0, 128, -1, 1.0)  # SGLang's defaults
    assert parse_body(CompletionRequest, b'{"prompt": ["one"]}').one_prompt() == "one"
    assert parse_body(CompletionRequest, b'{"prompt": [1, 2]}').one_prompt() == [1, 2]
    with pytest.raises(ApiError, match="one prompt"):
        parse_body(CompletionRequest, b'{"prompt": ["a", "b"]}').one_prompt()


@pytest.mark.parametrize(("body", "param"), [
    (b"{", None),
    (b'"text"', None),
    (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}', "max_tokens"),
    (b'{"messages": [{"role": "user", "content": "x"}], "ignore_eos": 1}', "ignore_eos"),
    (b'{"messages": [{"role": "user", "content": 7}]}', "messages.0.content"),
    (b'{"messages": [{"role": "user", "content": "x"}], "stop": 5}', "stop"),
])
def test_invalid_bodies_are_400_naming_the_field(body, param):
    with pytest.raises(ApiError) as error:
        parse_body(ChatCompletionRequest, body)
    assert error.value.status == 400
    assert error.value.body["error"]["param"] == param
    assert error.value.body["error"]["type"] == "invalid_request_error"


# ---- stop strings, against a plain model: emit everything before the earliest stop ------------


def model_output(text: str, stops: list[str]) -> tuple[str, bool]:
    """Read the text one character at a time; stop at the first moment a stop string is
    complete, cutting before the longest one that ends there."""
    for end in range(1, len(text) + 1):
        done = [s for s in stops if s and text[:end].endswith(s)]
        if done:
            return text[: end - max(map(len, done))], True
    return text, False


def held_back(seen: str, stops: list[str]) -> str:
    """What a maximal-emitting checker holds: the longest suffix of `seen` that is a proper
    prefix of a stop string."""
    best = ""
    for s in stops:
        for n in range(1, len(s)):
            if seen.endswith(s[:n]) and n > len(best):
                best = s[:n]
    return best


@pytest.mark.parametrize("seed", [random.randrange(1 << 30) for _ in range(200)])
def test_stop_checker_matches_the_model_on_random_streams(seed):
    rng = random.Random(seed)
    alphabet = "ab c"
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
    stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
             for _ in range(rng.randint(0, 3))]
    cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(0, 8))))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)])]
    checker, out, seen = StopChecker(stops), "", ""
    for piece in pieces:
        out += checker.feed(piece)
        seen += piece
        if checker.stopped:
            break
        # never more held back than could still become a stop string
        assert seen == out + held_back(seen, stops), (seen, out, stops)
    if not checker.stopped:
        out += checker.flush()
    want, stopped = model_output(text, stops)
    assert (out, checker.stopped) == (want, stopped), (text, stops, pieces)


def test_stop_string_split_across_pieces_is_never_emitted():
    checker = StopChecker(["###"])
    assert checker.feed("Hello #") == "Hello "
    assert checker.feed("#") == ""
    assert checker.feed("# world") == ""
    assert checker.stopped and checker.flush() == ""


# ---- the guard's rules and the engine's limits (issue 11) ---------------------------------------


def test_loopback_hosts_are_the_bound_address_and_localhost_with_the_port():
    port = random.randrange(1024, 65536)
    assert loopback_hosts("127.0.0.1", port) == {f"127.0.0.1:{port}", f"localhost:{port}"}
    assert loopback_hosts("::1", port) == {f"[::1]:{port}", f"localhost:{port}"}
    assert loopback_hosts("127.0.0.1", 80) == {"127.0.0.1:80", "localhost:80", "127.0.0.1",
                                               "localhost"}  # a browser omits port 80
    for host in ("0.0.0.0", "192.168.1.7", "::", "my-box.example"):
        assert loopback_hosts(host, port) is None  # serving the network on purpose


@pytest.mark.parametrize(("value", "ok"), [
    ("application/json", True), ("application/json; charset=utf-8", True),
    ("APPLICATION/JSON", True), ("text/plain", False), ("", False), ("application/jsonl", False),
    ("application/x-www-form-urlencoded", False), ("text/plain; application/json", False),
])
def test_only_json_content_types_pass(value, ok):
    assert is_json(value) is ok


def test_limits_name_the_field_and_bound_ids_and_prompt_characters():
    rng = random.Random()
    vocab, context = rng.randrange(1000, 200_000), rng.randrange(64, 4096)
    limits = RequestLimits(vocab, context)
    ids = [rng.randrange(vocab) for _ in range(50)]
    parse_body(CompletionRequest, json.dumps({"prompt": ids}).encode(), limits)
    for bad in (vocab, vocab + rng.randrange(1 << 40), -1, -rng.randrange(1 << 62), 1 << 64):
        body = {"prompt": ids[:3] + [bad] + ids[3:]}
        with pytest.raises(ApiError, match=str(bad)) as e:
            parse_body(CompletionRequest, json.dumps(body).encode(), limits)
        assert e.value.body["error"]["param"] == "prompt"
        with pytest.raises(ApiError) as e:
            parse_body(GenerateRequest, json.dumps({"input_ids": [bad]}).encode(), limits)
        assert e.value.body["error"]["param"] == "input_ids"
    for top_k in (0, -2, vocab + 1, 1 << 63, 1 << 64):
        with pytest.raises(ApiError) as e:
            parse_body(GenerateRequest, json.dumps({"text": "x", "sampling_params": {
                "top_k": top_k}}).encode(), limits)
        assert e.value.body["error"]["param"] == "sampling_params.top_k"
        with pytest.raises(ApiError) as e:
            parse_body(CompletionRequest, json.dumps({"prompt": "x", "top_k": top_k}).encode(),
                       limits)
        assert e.value.body["error"]["param"] == "top_k"
    parse_body(GenerateRequest, json.dumps({"text": "x", "sampling_params": {
        "top_k": vocab}}).encode(), limits)
    chars = limits.max_prompt_chars
    parse_body(CompletionRequest, json.dumps({"prompt": "y" * chars}).encode(), limits)
    with pytest.raises(ApiError, match="cannot fit") as e:
        parse_body(CompletionRequest, json.dumps({"prompt": "y" * (chars + 1)}).encode(), limits)
    assert e.value.body["error"]["code"] == "context_length_exceeded"


def test_a_temperature_too_small_to_divide_by_is_sent_as_greedy():
    for t in (1e-300, 5e-324, 9.9e-6):
        params = parse_body(CompletionRequest, json.dumps({"prompt": "x", "temperature": t})
                            .encode()).sampling_params(4)
        assert params.temperature == 0.0 and params.is_greedy
    kept = parse_body(CompletionRequest, b'{"prompt": "x", "temperature": 0.5}').sampling_params(4)
    assert kept.temperature == 0.5


def test_counts_are_bounded_before_any_work_that_grows_with_them():
    """Stop strings (number and length), chat messages and prompt ids (at least the context
    is refused by its count, before the ids are looked at): 400 naming the field; the bounds
    themselves pass."""
    rng = random.Random()
    context = rng.randrange(64, 4096)
    limits = RequestLimits(50_000, context)
    chat = {"messages": [{"role": "user", "content": "x"}]}

    def refused(cls, body: dict, param: str) -> ApiError:
        with pytest.raises(ApiError) as e:
            parse_body(cls, json.dumps(body).encode(), limits)
        assert e.value.status == 400 and e.value.body["error"]["param"] == param, e.value.body
        return e.value

    refused(ChatCompletionRequest, {**chat, "stop": ["ab"] * (MAX_STOPS + 1)}, "stop")
    refused(CompletionRequest, {"prompt": "x", "stop": "s" * (MAX_STOP_CHARS + 1)}, "stop")
    refused(GenerateRequest, {"text": "x", "sampling_params": {
        "stop": ["a", "b" * (MAX_STOP_CHARS + 1)]}}, "sampling_params.stop")
    refused(ChatCompletionRequest, {"messages": chat["messages"] * (MAX_MESSAGES + 1)},
            "messages")
    # the count wins over an id outside the vocabulary further on
    for ids in ([1] * context, [1] * (context - 1) + [1 << 40], [7] * (context * 50)):
        error = refused(CompletionRequest, {"prompt": ids}, "prompt")
        assert error.body["error"]["code"] == "context_length_exceeded"
        refused(GenerateRequest, {"input_ids": ids}, "input_ids")
    parse_body(ChatCompletionRequest, json.dumps({
        "messages": chat["messages"] * MAX_MESSAGES,
        "stop": ["\n" * MAX_STOP_CHARS] * MAX_STOPS}).encode(), limits)
    parse_body(CompletionRequest, json.dumps({"prompt": [5] * (context - 1)}).encode(), limits)
