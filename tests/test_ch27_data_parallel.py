"""Chapter 27: --dp-size N scheduler replicas behind one HTTP front.

One server with --dp-size 2 on the bundled SmolLM2 serves the module: the official openai client
(chat, completions, streaming), greedy answers equal to the one-engine path (the offline LLM runs
the same scheduler and engine as a --dp-size 1 server), both replicas used and reported per
replica (/health, /metrics, /get_load), data_parallel_rank pins a request, n answers share a
replica, cached_tokens, flush_cache on every replica, SIGTERM stops every process. A second
server is killed replica by SIGKILL. The load balancer, the tokenizers' replica queues and the
client's routing are tested on their own, without an engine; the flags without loading a model.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import openai
import psutil
import pytest
from conftest import CHAT_PROMPTS, RunningServer
from prometheus_client.parser import text_string_to_metric_families

from minisgl.core import SamplingParams
from minisgl.message import AbortMsg, ControlMsg, ControlReply, TokenizeMsg
from minisgl.message.dp import (
    LOAD_BALANCE_METHODS,
    LoadBalancer,
    ReplicaClient,
    ReplicaQueues,
    combine,
    shortest_queue,
)
from minisgl.message.queues import PullQueue, PushQueue
from minisgl.server.args import FlagError, ServerArgs, parse_args

SMALL = ["--num-pages", "1024", "--max-seq-len", "512", "--log-interval", "0"]


# ---- the balancer, the replica queues and the client's routing, without an engine -------------


def test_round_robin_takes_the_replicas_in_turn():
    balancer = LoadBalancer(3, "round_robin")
    picks = []
    for _ in range(7):
        picks.append(balancer.choose())
        balancer.sent(picks[-1])
    assert picks == [0, 1, 2, 0, 1, 2, 0]
    assert balancer.routed == [3, 2, 2] and balancer.unfinished == [3, 2, 2]


def test_shortest_queue_picks_the_replica_with_fewest_unfinished_requests():
    assert shortest_queue([5, 2, 7]) == 1
    assert shortest_queue([3, 3, 1, 1], start=0) == 2  # among equals, the first from start on
    assert shortest_queue([3, 3, 1, 1], start=3) == 3
    assert shortest_queue([0, 0], start=1) == 1
    # A plain model of the policy: whatever the loads, the pick has the smallest load
    rng = random.Random(0)
    for _ in range(500):
        loads = [rng.randrange(6) for _ in range(rng.randint(1, 6))]
        start = rng.randrange(len(loads))
        pick = shortest_queue(loads, start)
        assert loads[pick] == min(loads)
        # and no replica with that load lies between start and the pick
        assert all(loads[(start + k) % len(loads)] > min(loads)
                   for k in range((pick - start) % len(loads)))


def test_shortest_queue_follows_finishes_and_an_idle_server_takes_turns():
    balancer = LoadBalancer(2, "shortest_queue")
    assert [balancer.choose() for _ in range(4)] == [0, 1, 0, 1]  # nothing sent: turns
    balancer.sent(0)
    balancer.sent(0)  # replica 0 has two long requests
    assert [balancer.choose() for _ in range(3)] == [1, 1, 1]
    balancer.sent(1)
    balancer.finished(0)
    balancer.finished(0)  # replica 0 is idle again, 1 has one
    assert balancer.choose() == 0


@pytest.mark.parametrize("size,method", [(0, "round_robin"), (-1, "round_robin"),
                                         (2, "random"), (2, "")])
def test_balancer_refuses_bad_settings(size, method):
    with pytest.raises(ValueError):
        LoadBalancer(size, method)


@pytest.mark.parametrize("replica", [-1, 2, 10**30])
def test_balancer_refuses_replicas_that_do_not_exist(replica):
    with pytest.raises(ValueError, match="does not exist"):
        LoadBalancer(2).sent(replica)


def test_combine_adds_up_the_replicas_and_names_their_errors():
    balancer = LoadBalancer(2)
    balancer.sent(1)
    replies = [ControlReply(7, True, {"free_pages": 3, "running_requests": 1, "name": "x"}),
               ControlReply(8, False, {"free_pages": 4}, error="busy")]
    out = combine(replies, balancer)
    assert not out.ok and out.error == "replica 1: busy"
    assert out.info["free_pages"] == 7 and out.info["running_requests"] == 1
    assert "name" not in out.info  # only numbers add up
    assert [r["dp_rank"] for r in out.info["replicas"]] == [0, 1]
    assert [r["routed_requests"] for r in out.info["replicas"]] == [0, 1]


def test_replica_queues_send_each_message_to_its_replica(tmp_path):
    pulls = [PullQueue(f"ipc://{tmp_path}/r{i}") for i in range(3)]
    queues = ReplicaQueues([PushQueue(p.addr) for p in pulls])
    params = SamplingParams()
    queues.put([TokenizeMsg(1, params, "a", dp_rank=2), AbortMsg(1, 2), ControlMsg(5, "stats")])
    assert [type(m).__name__ for m in pulls[2].get(timeout=5) + pulls[2].get(timeout=5)] == \
        ["TokenizeMsg", "AbortMsg"]
    assert [m.command for m in pulls[0].get(timeout=5)] == ["stats"]
    assert pulls[1].get(timeout=0.1) == []
    for bad in (-1, 3):
        with pytest.raises(ValueError, match="replica"):
            queues.put([AbortMsg(2, bad)])
    queues.close()
    for p in pulls:
        p.close()


def test_client_stamps_requests_and_follows_them_with_aborts(tmp_path):
    """The frontend's side: each request carries its replica to the tokenizer, an open request's
    abort goes to its replica, a forgotten one's to every replica, and questions to all."""
    tokenizer = PullQueue(f"ipc://{tmp_path}/tok")
    client = ReplicaClient([tokenizer.addr], f"ipc://{tmp_path}/front",
                           LoadBalancer(2, "round_robin"))

    def sent() -> list:
        return tokenizer.get(timeout=5)

    try:
        params = SamplingParams()
        first = client.submit(params, text="a")
        second = client.submit(params, text="b")
        pinned = client.submit(params, text="c", dp_rank=1)
        assert [(m.uid, m.dp_rank) for m in sent() + sent() + sent()] == \
            [(first.uid, 0), (second.uid, 1), (pinned.uid, 1)]
        assert client.balancer.unfinished == [1, 2]
        with pytest.raises(ValueError, match="does not exist"):
            client.submit(params, text="d", dp_rank=2)
        client.fail_all("stopping")  # open requests: an abort to each one's replica
        assert sorted((m.uid, m.dp_rank) for m in sent() + sent() + sent()) == \
            [(first.uid, 0), (second.uid, 1), (pinned.uid, 1)]
        # Let go of one: forgotten here first (its replica's count drops), then its abort,
        # whose replica is no longer known, goes to every replica
        second.close()
        assert client.balancer.unfinished == [1, 1]
        assert [(m.uid, m.dp_rank) for m in sent() + sent()] == [(second.uid, 0), (second.uid, 1)]

        async def ask() -> None:  # a question goes to both replicas (nobody answers here)
            with pytest.raises(TimeoutError):
                await client.control("stats", timeout=0.2)

        asyncio.run(ask())
        questions = sent() + sent()
        assert [(type(m), m.dp_rank) for m in questions] == [(ControlMsg, 0), (ControlMsg, 1)]
    finally:
        client.close()
        tokenizer.close()


# ---- flags -------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags,message", [
    (["--dp-size", "0"], "--dp-size must be >= 1"),
    (["--dp-size", "-3"], "--dp-size must be >= 1"),
    (["--dp-size", str(10**30)], "needs 1000000000000000000000000000000 processes"),
    (["--dp-size", str((os.cpu_count() or 1) + 1)], "with a core each"),
    (["--dp-size", "2", "--shell"], "--shell talks to one replica"),
    (["--dp-size", "2", "--nnodes", "2", "--tp", "2", "--dist-init-addr", "10.0.0.1:5000"],
     "one server on each and put sglang-router in front"),
])
def test_bad_dp_flags_are_clear_errors(smollm2_dir, flags, message):
    with pytest.raises(FlagError, match=message):
        parse_args(["--model", str(smollm2_dir), "--device", "cpu", *flags])


@pytest.mark.parametrize("flags", [["--dp-size", "1.5"], ["--load-balance-method", "random"]])
def test_unparsable_dp_flags_exit_2_before_loading(smollm2_dir, flags):
    proc = subprocess.run([sys.executable, "-m", "minisgl", "--model", str(smollm2_dir), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert ("--dp-size" in proc.stderr) or ("--load-balance-method" in proc.stderr)


def test_server_args_check_the_method_too():
    with pytest.raises(ValueError, match="--load-balance-method must be one of"):
        ServerArgs(model_path="x", device="cpu", load_balance_method="least_loaded")
    assert set(LOAD_BALANCE_METHODS) == {"round_robin", "shortest_queue"}


# ---- one --dp-size 2 server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(smollm2_dir):
    srv = RunningServer(["--model", str(smollm2_dir), "--dp-size", "2", *SMALL])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0,
                         timeout=300)


def metrics(server) -> dict[tuple[str, tuple], float]:
    status, text = server.get("/metrics")
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def routed(server) -> list[float]:
    values = metrics(server)
    return [values[("minisgl:dp_requests_routed_total",
                    (("dp_rank", str(r)), ("model_name", server.model_name)))] for r in (0, 1)]


def test_two_replicas_run_as_named_processes(server):
    launcher = psutil.Process(server.proc.pid)
    titles = {" ".join(p.cmdline()).strip() for p in launcher.children(recursive=True)}
    assert {"minisgl::scheduler-dp0", "minisgl::scheduler-dp1"} <= titles
    assert "minisgl::scheduler" not in titles


def test_openai_client_chat_completions_and_streaming(server, client):
    chat = client.chat.completions.create(
        model=server.model_name, messages=[{"role": "user", "content": CHAT_PROMPTS[0]}],
        max_tokens=12, temperature=0)
    assert "Paris" in chat.choices[0].message.content
    text = client.completions.create(model=server.model_name, prompt="The capital of France is",
                                     max_tokens=4, temperature=0)
    assert text.usage.completion_tokens == 4
    pieces, usage = [], None
    for chunk in client.chat.completions.create(
            model=server.model_name, messages=[{"role": "user", "content": CHAT_PROMPTS[0]}],
            max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}):
        pieces += [c.delta.content or "" for c in chunk.choices]
        usage = chunk.usage or usage
    assert "".join(pieces) == chat.choices[0].message.content
    assert usage.prompt_tokens == chat.usage.prompt_tokens


def test_greedy_answers_equal_the_single_engine(server, smollm2_dir):
    """Several chats at once over both replicas: each answer is the one engine's greedy answer
    (the offline LLM runs the scheduler and engine that a --dp-size 1 server runs)."""
    from transformers import AutoTokenizer

    from minisgl.llm import LLM

    tok = AutoTokenizer.from_pretrained(smollm2_dir)
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": p}],
                                                  tokenize=False, add_generation_prompt=True),
                          add_special_tokens=False) for p in CHAT_PROMPTS[:6]]
    before = routed(server)

    def ask(ids: list[int]) -> list[int]:
        status, body = server.post("/generate", {"input_ids": ids, "sampling_params": {
            "max_new_tokens": 10, "temperature": 0}})
        assert status == 200, body
        return body["output_ids"]

    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(ask, prompts))
    after = routed(server)
    assert [a - b for a, b in zip(after, before)] == [3, 3]  # round robin over both
    llm = LLM(str(smollm2_dir), num_pages=2048)
    try:
        want = [r["token_ids"] for r in llm.generate(prompts, SamplingParams(max_tokens=10),
                                                     use_tqdm=False)]
    finally:
        llm.shutdown()
    assert got == want


def test_health_metrics_and_load_report_each_replica(server):
    health = server.health()
    assert [r["dp_rank"] for r in health["replicas"]] == [0, 1]
    assert health["total_pages"] == sum(r["total_pages"] for r in health["replicas"]) == 2048
    assert all(r["routed_requests"] > 0 for r in health["replicas"])
    values = metrics(server)
    for rank in ("0", "1"):
        key = (("dp_rank", rank), ("model_name", server.model_name))
        assert ("minisgl:dp_kv_cache_usage_perc", key) in values
        assert values[("minisgl:dp_unfinished_requests", key)] == 0
    total = (("model_name", server.model_name),)
    assert ("minisgl:num_requests_running", total) in values  # the totals keep their names
    status, load = server.get("/get_load")
    assert status == 200 and [row["dp_rank"] for row in load] == [0, 1]
    assert all(row.keys() == {"dp_rank", "num_reqs", "num_waiting_reqs", "num_tokens"}
               for row in load)
    status, info = server.get("/server_info")
    assert status == 200 and info["dp_size"] == 2
    assert info["load_balance_method"] == "round_robin"


def test_data_parallel_rank_pins_a_request_and_cached_tokens_show_reuse(server):
    fresh = [random.Random().randrange(1000, 40000) for _ in range(40)]
    before = routed(server)
    bodies = []
    for _ in range(2):
        status, body = server.post("/generate", {"input_ids": fresh, "data_parallel_rank": 1,
                                                 "sampling_params": {"max_new_tokens": 2}})
        assert status == 200, body
        bodies.append(body)
    assert [a - b for a, b in zip(routed(server), before)] == [0, 2]
    assert bodies[0]["meta_info"]["cached_tokens"] == 0  # never seen before
    assert bodies[1]["meta_info"]["cached_tokens"] == len(fresh) - 1  # all but the last token
    status, body = server.post("/v1/completions", {
        "prompt": fresh, "max_tokens": 1, "data_parallel_rank": 1})
    assert status == 200 and body["usage"]["prompt_tokens_details"]["cached_tokens"] == \
        len(fresh) - 1


@pytest.mark.parametrize("value,status", [(2, 400), (-1, 400), ("1", 400), (1.0, 400),
                                          (10**30, 400), (None, 200)])
def test_data_parallel_rank_is_checked(server, value, status):
    got, body = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
        "data_parallel_rank": value})
    assert got == status, body
    if status == 400:
        assert body["error"]["param"] == "data_parallel_rank"


def test_n_answers_share_one_replica(server):
    before = routed(server)
    status, body = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": CHAT_PROMPTS[3]}], "max_tokens": 3, "n": 3,
        "temperature": 1.0})
    assert status == 200, body
    delta = sorted(a - b for a, b in zip(routed(server), before))
    assert delta == [0, 3]


def test_flush_cache_flushes_every_replica(server):
    status, body = server.post("/flush_cache", b"")
    assert status == 200, body
    assert [r["cached_pages"] for r in body["replicas"]] == [0, 0]
    assert body["free_pages"] == body["total_pages"] == 2048


def test_sigterm_stops_every_process(server):
    procs = [psutil.Process(server.proc.pid), *psutil.Process(server.proc.pid).children(True)]
    assert server.stop() == 0
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert alive == []


def test_sigkill_of_a_replica_stops_the_server_naming_it(smollm2_dir):
    srv = RunningServer(["--model", str(smollm2_dir), "--dp-size", "2",
                         "--load-balance-method", "shortest_queue", *SMALL])
    launcher = psutil.Process(srv.proc.pid)
    procs = [launcher, *launcher.children(recursive=True)]
    status, body = srv.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert status == 200, body
    victim = next(p for p in procs if " ".join(p.cmdline()).strip() == "minisgl::scheduler-dp1")
    victim.kill()
    try:
        assert srv.proc.wait(60) == 1  # non-zero: not a requested stop
    finally:
        srv.stop()
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert alive == []
    assert "scheduler-dp1 exited unexpectedly" in srv.log_text()
