"""Chapter 14: what operators of SGLang and vLLM expect from a server (issue 16).

SGLang's /generate with sampling_params, a 400 naming every field the server does not support,
stream_options.include_usage, --api-key, --served-model-name, Prometheus /metrics, the busy log,
process names, /get_model_info, /get_server_info, /version, --help, and the online benchmark.
One server on SmolLM2 (with an API key) serves the whole module.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import subprocess
import sys
import time
from pathlib import Path

import openai
import psutil
import pytest
from conftest import RunningServer
from prometheus_client.parser import text_string_to_metric_families

from minisgl.benchmark import serving as bench
from minisgl.server.args import build_parser

KEY = "sk-test-" + "".join(random.choice("abcdef0123456789") for _ in range(24))
NAME = "smol-served"


@pytest.fixture(scope="module")
def server(smollm2_dir):
    srv = RunningServer(["--model", str(smollm2_dir), "--num-pages", "4096", "--max-seq-len",
                         "1024", "--api-key", KEY, "--served-model-name", NAME,
                         "--log-interval", "1"], api_key=KEY)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0,
                         timeout=300)


def raw(server, method: str, path: str, body: dict | bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, object]:
    """A request with exactly these headers (no API key unless given)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    try:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        # header values as UTF-8 bytes: http.client would refuse what latin-1 cannot encode
        conn.request(method, path, body=data, headers={
            **({"Content-Type": "application/json"} if data is not None else {}),
            **{k: v.encode() for k, v in (headers or {}).items()}})
        resp = conn.getresponse()
        payload = resp.read()
        try:
            return resp.status, json.loads(payload)
        except json.JSONDecodeError:
            return resp.status, payload.decode()
    finally:
        conn.close()


def metrics(server) -> dict[tuple[str, tuple], float]:
    """Every sample of /metrics, parsed by prometheus-client's own parser."""
    status, text = server.get("/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(values: dict, name: str, **labels: str) -> float:
    return values.get((name, tuple(sorted({"model_name": NAME, **labels}.items()))), 0.0)


# ---- /generate: SGLang's body ------------------------------------------------------------------


def test_generate_honours_max_new_tokens_and_reports_meta_info(server):
    rng = random.Random()
    for _ in range(3):
        ids = [rng.randrange(1000, 40000) for _ in range(rng.randint(3, 40))]
        n = rng.randint(1, 12)
        status, body = server.post("/generate", {"input_ids": ids, "sampling_params": {
            "max_new_tokens": n, "ignore_eos": True, "temperature": 0}})
        assert status == 200, body
        assert len(body["output_ids"]) == n
        meta = body["meta_info"]
        assert meta["finish_reason"] == {"type": "length", "length": n}
        assert (meta["prompt_tokens"], meta["completion_tokens"]) == (len(ids), n)
        assert 0 <= meta["cached_tokens"] < len(ids)


def test_generate_stop_string_and_cumulative_stream(server):
    prompt = {"text": "Count: 1, 2, 3,", "sampling_params": {"max_new_tokens": 24,
                                                             "temperature": 0}}
    status, full = server.post("/generate", prompt)
    assert status == 200
    stop = full["text"][len(full["text"]) // 2:][:2]
    if stop.strip():
        cut = full["text"][: full["text"].index(stop)]
        status, got = server.post("/generate", {**prompt, "sampling_params": {
            **prompt["sampling_params"], "stop": [stop]}})
        assert got["text"] == cut and got["meta_info"]["finish_reason"] == {"type": "stop"}
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)
    conn.request("POST", "/generate", json.dumps({**prompt, "stream": True}),
                 {"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
    events = [e[len(b"data: "):] for e in conn.getresponse().read().split(b"\n\n") if e]
    conn.close()
    assert events[-1] == b"[DONE]"
    events = [json.loads(e) for e in events[:-1]]
    assert events[-1]["text"] == full["text"] and events[-1]["output_ids"] == full["output_ids"]
    assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
    assert [e["meta_info"]["completion_tokens"] for e in events] == \
        [len(e["output_ids"]) for e in events]


# ---- nothing silently ignored ------------------------------------------------------------------

CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
PROMPT = {"prompt": "Hi", "max_tokens": 2}
GEN = {"text": "Hi", "sampling_params": {"max_new_tokens": 2}}

UNSUPPORTED = [  # (path, body, the field the 400 must name)
    *[("/v1/chat/completions", {**CHAT, **extra}, name) for name, extra in [
        ("top_logprobs", {"top_logprobs": 2}), ("n", {"n": 1 << 40}),
        ("logit_bias", {"logit_bias": {"42": 3.0}}), ("store", {"store": True}),
        ("tools", {"tools": [{"type": "function", "function": {"name": "f"}}]}),
        ("tool_choice", {"tool_choice": "auto"}),
        # chapter 25 runs grammars; an invalid one is a 400 before and after it
        ("response_format", {"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "objectt"}}}}),
        ("max_new_tokens", {"max_new_tokens": 3}),  # SGLang's name in the OpenAI body
        ("stream_options", {"stream_options": {"include_usage": True}}),  # without stream
        ("stream_options.continuous_usage_stats", {"stream": True, "stream_options": {
            "include_usage": True, "continuous_usage_stats": True}}),
        ("messages.0.tool_calls", {"messages": [{"role": "assistant", "content": "x",
                                                  "tool_calls": []}]}),
        ("ünïcödé 字段", {"ünïcödé 字段": 1}), ("seed", {"seed": 1 << 63}),
        ("seed", {"seed": -(1 << 63) - 1}), ("seed", {"seed": 1.5}), ("seed", {"seed": "7"}),
        ("n", {"n": "2"}), ("user", {"user": 5}), ("metadata.a", {"metadata": {"a": 1}}),
        ("presence_penalty", {"presence_penalty": 1e308}),
        ("top_logprobs", {"top_logprobs": -1})]],
    *[("/v1/completions", {**PROMPT, **extra}, name) for name, extra in [
        ("echo", {"echo": True}), ("best_of", {"best_of": 3}), ("suffix", {"suffix": "end"}),
        ("prompt_logprobs", {
            "prompt_logprobs": 1}), ("", {"": 0})]],
    *[("/generate", {**GEN, **extra}, name) for name, extra in [
        ("max_tokens", {"max_tokens": 3}), ("temperature", {"temperature": 0}),
        ("return_logprob", {"return_logprob": True}), ("rid", {"rid": "abc"}),
        ("text", {"text": [1, 2]}), ("input_ids", {"text": None, "input_ids": [["1"]]}),
        ("sampling_params.max_tokens", {"sampling_params": {"max_tokens": 2}}),
        ("sampling_params.regex", {"sampling_params": {"regex": "(a+"}}),
        ("sampling_params.json_schema", {"sampling_params": {"json_schema": "{"}}),
        ("sampling_params.stop_token_ids", {"sampling_params": {"stop_token_ids": [2]}}),
        ("sampling_params.min_p", {"sampling_params": {"min_p": 0.1}}),
        ("sampling_params.skip_special_tokens", {"sampling_params": {
            "skip_special_tokens": False}}),
        ("sampling_params.max_new_tokens", {"sampling_params": {"max_new_tokens": 0}}),
        ("sampling_params.max_new_tokens", {"sampling_params": {"max_new_tokens": -5}}),
        ("sampling_params.max_new_tokens", {"sampling_params": {"max_new_tokens": 1 << 64}}),
        ("sampling_params.max_new_tokens", {"sampling_params": {"max_new_tokens": "4"}}),
        ("sampling_params.temperature", {"sampling_params": {"temperature": -1}}),
        ("sampling_params.top_p", {"sampling_params": {"top_p": 0}}),
        ("sampling_params.sampling_seed", {"sampling_params": {"sampling_seed": 1 << 64}}),
        ("sampling_params.stop", {"sampling_params": {"stop": [1]}}),
        ("sampling_params", {"sampling_params": [1, 2]}),
        ("sampling_params.ignore_eos", {"sampling_params": {"ignore_eos": "yes"}})]],
]


def test_every_unsupported_field_is_a_400_naming_it(server):
    for path, body, name in UNSUPPORTED:
        status, got = server.post(path, body)
        assert status == 400, (path, body, got)
        assert got["error"]["param"] == name, (path, body, got)
        assert got["error"]["type"] == "invalid_request_error"
    # The defaults of those fields, and the harmless ones, are accepted.
    ok = [("/v1/chat/completions", {**CHAT, "n": 1, "logprobs": False, "top_logprobs": 0,
                                    "presence_penalty": 0, "frequency_penalty": 0.0,
                                    "repetition_penalty": 1, "logit_bias": {}, "store": False,
                                    "user": "u-1", "safety_identifier": "s", "metadata": {},
                                    "prompt_cache_key": "k", "seed": -(1 << 63)}),
          ("/v1/completions", {**PROMPT, "echo": False, "best_of": 1, "logprobs": None,
                               "seed": (1 << 63) - 1}),
          ("/generate", {**GEN, "return_logprob": False, "sampling_params": {
              "max_new_tokens": 2, "n": 1, "min_p": 0, "stop_token_ids": [],
              "skip_special_tokens": True, "sampling_seed": 3}})]
    for path, body in ok:
        status, got = server.post(path, body)
        assert status == 200, (path, got)


def test_openai_client_defaults_are_accepted_and_refusals_are_typed(client):
    got = client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                         max_tokens=2, user="someone", seed=11, n=1)
    assert got.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        client.chat.completions.create(model=NAME, messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=2, logit_bias={"42": 1.0})
    with pytest.raises(openai.BadRequestError, match="best_of"):
        client.completions.create(model=NAME, prompt="Hi", max_tokens=2, best_of=2)


# ---- include_usage -----------------------------------------------------------------------------


def test_include_usage_on_chat_and_completion_streams(client):
    messages = [{"role": "user", "content": "Name three colors."}]
    once = client.chat.completions.create(model=NAME, messages=messages, max_tokens=8,
                                          temperature=0)
    for stream, usage_wanted in [
            (client.chat.completions.create(model=NAME, messages=messages, max_tokens=8,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}), True),
            (client.chat.completions.create(model=NAME, messages=messages, max_tokens=8,
                                            temperature=0, stream=True), False)]:
        chunks = list(stream)
        usages = [c.usage for c in chunks if c.usage is not None]
        if not usage_wanted:
            assert usages == []
            continue
        assert len(usages) == 1 and chunks[-1].usage is not None and chunks[-1].choices == []
        assert usages[0].prompt_tokens == once.usage.prompt_tokens
        assert usages[0].completion_tokens == once.usage.completion_tokens
        assert usages[0].total_tokens == once.usage.total_tokens
    chunks = list(client.completions.create(model=NAME, prompt=[5, 6, 7, 8], max_tokens=5,
                                            stream=True, stream_options={"include_usage": True},
                                            extra_body={"ignore_eos": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.prompt_tokens == 4 and chunks[-2].choices[0].finish_reason == "length"


# ---- --api-key and --served-model-name ---------------------------------------------------------


@pytest.mark.parametrize("auth", [None, "", "Bearer", "Bearer ", f"bearer {KEY}", KEY,
                                  f"Bearer {KEY[:-1]}", f"Bearer {KEY}x", f"Bearer  {KEY}",
                                  f"Basic {KEY}", "Bearer ключ",
                                  "Bearer " + "a" * 10000])
def test_a_missing_or_wrong_key_is_401_everywhere_but_health(server, auth):
    # (not tried: trailing spaces, which HTTP strips from every header value before the app)
    headers = {} if auth is None else {"Authorization": auth}
    for method, path, body in [("GET", "/v1/models", None), ("GET", "/metrics", None),
                               ("POST", "/generate", GEN), ("POST", "/v1/completions", PROMPT),
                               ("GET", "/get_server_info", None), ("GET", "/nowhere", None),
                               ("POST", "/flush_cache", {})]:
        status, got = raw(server, method, path, body, headers)
        assert status == 401, (auth, path, got)
        assert got["error"]["code"] == "invalid_api_key"
        assert KEY not in json.dumps(got)
    assert raw(server, "GET", "/health", None, headers)[0] == 200


def test_the_openai_client_with_a_wrong_key_gets_an_authentication_error(server, client):
    wrong = openai.OpenAI(base_url=server.base_url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        wrong.models.list()
    assert [m.id for m in client.models.list().data] == [NAME]


def test_served_model_name_is_the_only_name(server, client, smollm2_dir):
    got = client.completions.create(model=NAME, prompt="Hi", max_tokens=2)
    assert got.model == NAME
    for other in (str(smollm2_dir), "HuggingFaceTB/SmolLM2-135M-Instruct", NAME.upper()):
        with pytest.raises(openai.NotFoundError):
            client.completions.create(model=other, prompt="Hi", max_tokens=2)


# ---- /metrics ----------------------------------------------------------------------------------


def test_metrics_parse_and_count_the_requests_sent(server):
    before = metrics(server)
    rng = random.Random()
    sent = []  # (prompt tokens, output tokens)
    for _ in range(3):
        ids = [rng.randrange(1000, 40000) for _ in range(rng.randint(2, 30))]
        n = rng.randint(1, 6)
        status, got = server.post("/v1/completions", {"prompt": ids, "max_tokens": n,
                                                      "ignore_eos": True})
        assert status == 200
        sent.append((got["usage"]["prompt_tokens"], got["usage"]["completion_tokens"]))
    status, got = server.post("/generate", {"text": "Hello there", "sampling_params": {
        "max_new_tokens": 3, "ignore_eos": True}})
    sent.append((got["meta_info"]["prompt_tokens"], 3))
    server.post("/v1/completions", {"prompt": "x", "best_of": 2})  # a 400 counts nowhere
    after = metrics(server)

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("minisgl:prompt_tokens_total") == sum(p for p, _ in sent)
    assert delta("minisgl:generation_tokens_total") == sum(o for _, o in sent)
    assert delta("minisgl:prefix_cache_queries_total") == sum(p for p, _ in sent)
    assert 0 <= delta("minisgl:prefix_cache_hits_total") <= sum(p for p, _ in sent)
    assert delta("minisgl:request_success_total", finished_reason="length") == 4
    assert delta("minisgl:time_to_first_token_seconds_count") == 4
    assert delta("minisgl:e2e_request_latency_seconds_count") == 4
    assert delta("minisgl:inter_token_latency_seconds_count") == sum(o - 1 for _, o in sent)
    assert delta("minisgl:e2e_request_latency_seconds_sum") > 0
    assert sample(after, "minisgl:e2e_request_latency_seconds_bucket", le="+Inf") == \
        sample(after, "minisgl:e2e_request_latency_seconds_count")
    assert sample(after, "minisgl:num_requests_running") == 0
    assert sample(after, "minisgl:num_requests_waiting") == 0
    assert 0 <= sample(after, "minisgl:kv_cache_usage_perc") <= 1
    assert ("minisgl:num_preemptions_total", (("model_name", NAME),)) in after


def test_busy_log_lines_while_serving(server):
    server.post("/v1/completions", {"prompt": "Once", "max_tokens": 30, "ignore_eos": True})
    deadline = time.monotonic() + 30
    while "decode " not in server.log_text() and time.monotonic() < deadline:
        time.sleep(0.5)
    lines = [line for line in server.log_text().splitlines() if "decode " in line]
    assert lines and "tok/s" in lines[-1] and "running" in lines[-1] and "KV" in lines[-1]


# ---- process names, info endpoints, --help -----------------------------------------------------


def test_every_process_is_named(server):
    launcher = psutil.Process(server.proc.pid)
    titles = {}
    for proc in [launcher, *launcher.children(recursive=True)]:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        if cmdline.startswith("minisgl::"):
            comm = Path(f"/proc/{proc.pid}/comm").read_text().strip()
            assert cmdline.startswith(comm)  # the short name top shows, cut to 15 bytes
            titles[proc.pid] = cmdline
    assert sorted(titles.values()) == ["minisgl::api-server", "minisgl::detokenizer",
                                       "minisgl::scheduler", "minisgl::tokenizer-0"]
    assert KEY not in " ".join(launcher.cmdline())  # the title hides the flags


def test_info_endpoints(server, smollm2_dir):
    status, info = server.get("/get_model_info")
    assert status == 200 and info["model_path"] == str(smollm2_dir)
    assert info["is_generation"] is True and info["served_model_name"] == NAME
    assert info["max_context_length"] == 1024 and info["vocab_size"] == 49152
    status, info = server.get("/get_server_info")
    assert status == 200 and KEY not in json.dumps(info)
    assert info["api_key_required"] is True and "api_key" not in info
    assert info["served_model_name"] == NAME and info["max_seq_len"] == 1024
    assert info["scheduler"]["total_pages"] == 4096
    import minisgl

    assert server.get("/version") == (200, {"version": minisgl.__version__})
    for path in ("/version", "/get_model_info", "/metrics"):
        assert server.post(path, {})[0] == 405


def test_help_shows_every_default():
    parser = build_parser()
    text = parser.format_help()
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    assert text.count("(default:") == len(options)
    for flag in ("--api-key", "--served-model-name", "--log-level", "--log-interval"):
        assert flag in text


# ---- the online benchmark ----------------------------------------------------------------------


def test_benchmark_pure_parts():
    rng = random.Random(0)
    times = bench.arrival_times(random.Random(1), 20000, 8.0)
    assert times[0] == 0 and all(b >= a for a, b in zip(times, times[1:]))
    assert abs(times[-1] / (len(times) - 1) - 1 / 8) < 0.01  # mean gap 1/rate
    assert bench.arrival_times(rng, 5, math.inf) == [0.0] * 5
    pairs = bench.sample_lengths(random.Random(2), "sharegpt", 20000, 0, 0, 0, 1 << 30)
    assert abs(sum(p for p, _ in pairs) / len(pairs) / bench.SHAREGPT_MEAN_PROMPT - 1) < 0.1
    assert abs(sum(o for _, o in pairs) / len(pairs) / bench.SHAREGPT_MEAN_OUTPUT - 1) < 0.1
    assert all(p + o <= 600 for p, o in
               bench.sample_lengths(random.Random(3), "sharegpt", 500, 0, 0, 0, 600))
    pairs = bench.sample_lengths(random.Random(4), "random", 500, 100, 20, 0.5, 2048)
    assert all(50 <= p <= 100 and 10 <= o <= 20 for p, o in pairs)
    assert bench.sample_lengths(random.Random(4), "random", 50, 100, 20, 0.5, 2048) == pairs[:50]
    values = [rng.random() for _ in range(101)]
    got = bench.percentiles(values)
    ordered = sorted(values)
    assert math.isclose(got["median"], ordered[50] * 1000)
    assert math.isclose(got["p90"], ordered[90] * 1000)
    assert math.isclose(got["mean"], sum(values) / len(values) * 1000)
    assert all(math.isnan(v) for v in bench.percentiles([]).values())
    for bad in (["--request-rate", "0"], ["--request-rate", "nan"], ["--request-rate", "-1"],
                ["--num-requests", "0"], ["--max-concurrency", "0"], ["--range-ratio", "1"],
                ["--input-len", "0"]):
        with pytest.raises(SystemExit):
            bench.check_args(bench.build_parser().parse_args(bad))


SYNTHETIC = "no ShareGPT data is downloaded or read"


def test_benchmark_help_says_sharegpt_lengths_are_synthetic():
    # the learner's question: does --dataset sharegpt need (or use) the ShareGPT data?
    text = " ".join(bench.build_parser().format_help().split())
    assert SYNTHETIC in text and "log-normal" in text


def test_benchmark_help_on_the_command_line_says_so_too():
    out = subprocess.run([sys.executable, "-m", "minisgl.benchmark.serving", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert SYNTHETIC in " ".join(out.stdout.split())


def test_online_benchmark_names_a_refused_key(server):
    out = subprocess.run(
        [sys.executable, "-m", "minisgl.benchmark.serving", "--base-url", server.base_url,
         "--api-key", "wrong", "--num-requests", "1", "--no-progress"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "HTTP 401" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_online_benchmark_at_two_rates_prints_the_table_and_writes_the_plot(server, tmp_path):
    png, result = tmp_path / "latency.png", tmp_path / "result.json"
    out = subprocess.run(
        [sys.executable, "-m", "minisgl.benchmark.serving", "--base-url", server.base_url,
         "--api-key", KEY, "--num-requests", "4", "--request-rate", "4", "inf",
         "--input-len", "16", "--output-len", "4", "--warmup", "1", "--no-progress",
         "--plot", str(png), "--result-json", str(result)],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    for row in ("request throughput (req/s)", "output throughput (tok/s)", "TTFT p99 (ms)",
                "ITL median (ms)", "E2E p90 (ms)", "4 req/s", "inf req/s"):
        assert row in out.stdout, out.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = json.loads(result.read_text())["runs"]
    assert [r["request_rate"] for r in runs] == [4.0, math.inf]
    for run in runs:
        assert (run["completed"], run["failed"]) == (4, 0)
        assert run["total_input_tokens"] == 4 * 16 and run["total_output_tokens"] == 4 * 4
        assert run["ttft_ms"]["p99"] >= run["ttft_ms"]["median"] > 0
