"""Several servers behind sglang-router (chapter 27): round robin against cache-aware routing on a
shared-prefix workload.

    python -m minisgl.benchmark.router                # CPU: two SmolLM2 servers on loopback
    python -m minisgl.benchmark.router --device cuda --model Qwen/Qwen3-0.6B --dummy-weight \
        --num-pages 60000 --groups 64 --per-group 8 --concurrency 32      # both on one GPU
    python -m minisgl.benchmark.router ... --single   # the same workload against one server

The workload: `groups` groups of `per_group` chat requests; a group's requests share a long system
prompt (random words, its own per group) and differ in a short question; all requests are
shuffled (seeded), so a group's requests arrive spread over the run. Each server's KV pool
(--num-pages) holds fewer system prompts than there are groups: a policy that sends a group's
requests to any server makes every server cache every prompt, and their pools evict each other's
prompts before they are reused; a policy that keeps a group on one server needs each prompt
cached once.

For each policy the router is started afresh in front of the same servers, whose prefix caches are
flushed first, and the requests are streamed through it, `concurrency` at a time. Printed per
policy: throughput (requests and output tokens per second), TTFT (mean and median, from sending
the request to its first content), and the prompt tokens the servers found in their radix caches
(usage.prompt_tokens_details.cached_tokens); then cache-aware over round robin.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POLICIES = ("round_robin", "cache_aware")
WORDS = ("amber basil cedar delta ember fjord grove harbor island jasper kelp lagoon meadow "
         "nectar orchid pebble quartz raven summit thistle umber valley willow yarrow zephyr "
         "acorn birch clover dune estuary fern glacier heath iris juniper knoll lichen moss "
         "nettle oak prairie quill reed sage tundra").split()


@dataclass(frozen=True)
class ChatRequest:
    group: int
    messages: list[dict[str, str]]


def shared_prefix_workload(groups: int, per_group: int, prefix_words: int, seed: int = 0
                           ) -> list[ChatRequest]:
    """groups x per_group chats, shuffled; a group's chats share a system prompt of
    `prefix_words` random words (different from the first words on between groups)."""
    rng = random.Random(seed)
    requests = []
    for group in range(groups):
        system = f"Group {group}. " + " ".join(rng.choice(WORDS) for _ in range(prefix_words))
        for i in range(per_group):
            question = f"Question {i}: name one word from the list above."
            requests.append(ChatRequest(group, [{"role": "system", "content": system},
                                                {"role": "user", "content": question}]))
    rng.shuffle(requests)
    return requests


@dataclass
class Answer:
    ttft: float  # seconds from sending to the first content
    latency: float  # seconds from sending to the end of the stream
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int


def stream_chat(url: str, req: ChatRequest, max_tokens: int, timeout: float = 600.0) -> Answer:
    """One streamed chat completion at `url` (http://host:port), timed; raises on any error."""
    host, _, port = url.removeprefix("http://").rpartition(":")
    body = {"messages": req.messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    start = time.perf_counter()
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status} {resp.read()[:300]!r}")
        ttft, usage = None, None
        for line in resp:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                usage = chunk["usage"]
            if ttft is None and any(c["delta"].get("content") for c in chunk["choices"]):
                ttft = time.perf_counter() - start
    finally:
        conn.close()
    if usage is None or ttft is None:
        raise RuntimeError(f"{url}: the stream ended without content or usage")
    return Answer(ttft, time.perf_counter() - start, usage["prompt_tokens"],
                  usage["prompt_tokens_details"]["cached_tokens"], usage["completion_tokens"])


@dataclass
class RunResult:
    name: str
    answers: list[Answer]
    seconds: float
    per_worker: list[int] | None = None  # requests each server finished (behind a router)

    @property
    def cached_tokens(self) -> int:
        return sum(a.cached_tokens for a in self.answers)

    @property
    def prompt_tokens(self) -> int:
        return sum(a.prompt_tokens for a in self.answers)

    @property
    def mean_ttft(self) -> float:
        return statistics.fmean(a.ttft for a in self.answers)

    @property
    def p50_ttft(self) -> float:
        return statistics.median(a.ttft for a in self.answers)

    @property
    def output_tokens(self) -> int:
        return sum(a.completion_tokens for a in self.answers)

    def line(self) -> str:
        return (f"{self.name:<12} {len(self.answers)} requests in {self.seconds:.2f} s: "
                f"{len(self.answers) / self.seconds:.2f} req/s, "
                f"{self.output_tokens / self.seconds:.1f} output tok/s; TTFT mean "
                f"{1000 * self.mean_ttft:.0f} ms, p50 {1000 * self.p50_ttft:.0f} ms; cached "
                f"prompt tokens {self.cached_tokens} of {self.prompt_tokens} "
                f"({100 * self.cached_tokens / max(1, self.prompt_tokens):.1f}%)"
                + ("" if self.per_worker is None else
                   f"; requests per server {'/'.join(map(str, self.per_worker))}"))


def run_workload(name: str, url: str, requests: list[ChatRequest], max_tokens: int,
                 concurrency: int, progress: Callable[[str], None] | None = None) -> RunResult:
    """Stream every request through `url`, `concurrency` at a time."""
    start, answers = time.perf_counter(), []
    with ThreadPoolExecutor(concurrency) as pool:
        futures = [pool.submit(stream_chat, url, req, max_tokens) for req in requests]
        for i, future in enumerate(futures, 1):
            answers.append(future.result())
            if progress is not None and (i % 10 == 0 or i == len(futures)):
                progress(f"{name}: {i}/{len(futures)} requests done "
                         f"({time.perf_counter() - start:.0f} s)")
    return RunResult(name, answers, time.perf_counter() - start)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, method: str = "GET", timeout: float = 30.0) -> tuple[int, Any]:
    host, _, rest = url.removeprefix("http://").partition("/")
    host, _, port = host.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, "/" + rest)
        resp = conn.getresponse()
        raw = resp.read()
        try:
            return resp.status, json.loads(raw)
        except json.JSONDecodeError:
            return resp.status, raw.decode(errors="replace")
    finally:
        conn.close()


def wait_until(check: Callable[[], bool], what: str, proc: subprocess.Popen, log: Path,
               timeout: float) -> None:
    """Poll `check` until it holds; an exited `proc` or the deadline is an error with its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} was not ready after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


class Process:
    """A child process with its output in a log file; `stop` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        with open(log, "w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **(env or {})})

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_server(server_args: list[str], folder: Path, env: dict[str, str] | None = None,
                 timeout: float = 900.0) -> tuple[Process, str]:
    """`python -m minisgl` on a free loopback port; returns it and its URL once healthy."""
    port = free_port()
    server = Process([sys.executable, "-m", "minisgl", "--port", str(port), *server_args],
                     folder / f"server-{port}.log", env)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: http_json(url + "/health")[0] == 200, f"the server on port {port}",
               server.proc, server.log, timeout)
    return server, url


def router_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("sglang_router") is not None


def start_router(worker_urls: list[str], policy: str, folder: Path, timeout: float = 120.0,
                 extra: list[str] | None = None) -> tuple[Process, str]:
    """sglang-router in front of the workers; returns it and its URL once every worker is
    registered and healthy (the router adds them in the background after it starts)."""
    port, metrics_port = free_port(), free_port()
    router = Process([sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
                      "--port", str(port), "--prometheus-port", str(metrics_port),
                      "--policy", policy, "--log-level", "warn", "--worker-urls", *worker_urls,
                      *(extra or [])], folder / f"router-{policy}-{port}.log")
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        status, body = http_json(url + "/workers")
        return status == 200 and sum(w.get("is_healthy", False)
                                     for w in body.get("workers", [])) == len(worker_urls)

    wait_until(ready, f"sglang-router ({policy})", router.proc, router.log, timeout)
    return router, url


def finished_requests(url: str) -> int:
    """The requests a server has finished, from its Prometheus counter."""
    status, text = http_json(url + "/metrics")
    if status != 200:
        raise RuntimeError(f"{url}/metrics: {status}")
    return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("minisgl:request_success_total{")))


def flush_caches(worker_urls: list[str]) -> None:
    for url in worker_urls:
        status, body = http_json(url + "/flush_cache", "POST")
        if status != 200:
            raise RuntimeError(f"{url}/flush_cache: {status} {body}")


def compare_policies(worker_urls: list[str], requests: list[ChatRequest], max_tokens: int,
                     concurrency: int, folder: Path, policies: tuple[str, ...] = POLICIES,
                     progress: Callable[[str], None] | None = None) -> dict[str, RunResult]:
    """The workload through a fresh router per policy, the workers' caches flushed before each."""
    results = {}
    for policy in policies:
        flush_caches(worker_urls)
        router, url = start_router(worker_urls, policy, folder)
        try:
            before = [finished_requests(u) for u in worker_urls]
            results[policy] = run_workload(policy, url, requests, max_tokens, concurrency,
                                           progress)
            results[policy].per_worker = [finished_requests(u) - b
                                          for u, b in zip(worker_urls, before)]
        finally:
            router.stop()
    return results


def ratios(base: RunResult, other: RunResult) -> str:
    return (f"{other.name} / {base.name}: throughput {base.seconds / other.seconds:.2f}x, "
            f"mean TTFT {other.mean_ttft / base.mean_ttft:.2f}x, p50 TTFT "
            f"{other.p50_ttft / base.p50_ttft:.2f}x, cached prompt tokens "
            f"{other.cached_tokens / max(1, base.cached_tokens):.2f}x")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="HuggingFaceTB/SmolLM2-135M-Instruct")
    p.add_argument("--dummy-weight", action="store_true")
    p.add_argument("--device", default="cpu")
    p.add_argument("--workers", type=int, default=2, help="servers behind the router")
    p.add_argument("--num-pages", type=int, default=1400,
                   help="each server's KV pool in tokens (page size 1): fewer than the groups' "
                        "system prompts need")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--per-group", type=int, default=4)
    p.add_argument("--prefix-words", type=int, default=200, help="words of each system prompt")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--policies", default=",".join(POLICIES),
                   help="the router's policies to run, comma-separated ('': none, with --single)")
    p.add_argument("--single", action="store_true",
                   help="also run the workload against the first server alone, no router (the "
                        "baseline; on a GPU give it the whole pool: --workers 1 --policies '')")
    p.add_argument("--server-args", default="",
                   help="more flags for every server, e.g. '--max-running-requests 64'")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not router_available():
        print("sglang-router is not installed: pip install 'minisgl[router]'", file=sys.stderr)
        return 1

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    server_args = ["--model", args.model, "--device", args.device, "--num-pages",
                   str(args.num_pages), "--log-interval", "0", *args.server_args.split()]
    if args.dummy_weight:
        server_args.append("--dummy-weight")
    requests = shared_prefix_workload(args.groups, args.per_group, args.prefix_words, args.seed)
    print(f"workload: {args.groups} groups x {args.per_group} requests, system prompts of "
          f"{args.prefix_words} words, {args.max_tokens} output tokens each, concurrency "
          f"{args.concurrency}; {args.workers} servers ({' '.join(server_args)})", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="minisgl-router-bench-"))
    servers: list[Process] = []
    try:
        # CPU servers on one machine share its cores: each takes its share of the threads
        env = None if args.device.startswith("cuda") else \
            {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // args.workers))}
        progress(f"starting {args.workers} servers (logs in {folder})")
        urls = []
        for _ in range(args.workers):
            server, url = start_server(server_args, folder, env)
            servers.append(server)
            urls.append(url)
        results = compare_policies(urls, requests, args.max_tokens, args.concurrency, folder,
                                   tuple(p for p in args.policies.split(",") if p), progress)
        if args.single:
            flush_caches(urls[:1])
            results["single"] = run_workload("single", urls[0], requests, args.max_tokens,
                                             args.concurrency, progress)
        for result in results.values():
            print(result.line(), flush=True)
        if {"round_robin", "cache_aware"} <= results.keys():
            print(ratios(results["round_robin"], results["cache_aware"]))
        if "single" in results:
            for name in ("round_robin", "cache_aware"):
                if name in results:
                    print(ratios(results["single"], results[name]))
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
