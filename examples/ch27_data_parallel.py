"""Chapter 27: data parallelism, in one server and across servers, on the CPU.

1. `python -m minisgl --dp-size 2`: two scheduler replicas behind one HTTP front. Four chats go
   through it; after each, the per-replica counts in /health say which replica took it (round
   robin: 0, 1, 0, 1), and the repeated question shows its prompt found in that replica's radix
   cache (cached_tokens).
2. If sglang-router is installed (`pip install 'minisgl[router]'`): two servers, the router in
   front with --policy cache_aware, and two groups of chats with a shared system prompt each:
   every group stays on one server, whose cache then holds its prompt.
"""

from __future__ import annotations

import http.client
import json
import sys
import tempfile
from pathlib import Path

from minisgl.benchmark import router as bench

MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
SMALL = ["--model", MODEL, "--num-pages", "1024", "--max-seq-len", "512", "--log-interval", "0"]


def chat(url: str, messages: list[dict[str, str]]) -> dict:
    host, _, port = url.removeprefix("http://").rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=300)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(
            {"messages": messages, "max_tokens": 8, "temperature": 0}),
            {"Content-Type": "application/json"})
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def routed(url: str) -> list[int]:
    return [r["routed_requests"] for r in bench.http_json(url + "/health")[1]["replicas"]]


def one_server_two_replicas(folder: Path) -> None:
    print("== python -m minisgl --dp-size 2 (round robin)")
    server, url = bench.start_server([*SMALL, "--dp-size", "2"], folder)
    try:
        questions = ["What is the capital of France?", "Name a primary colour.",
                     "What is the capital of France?", "Name a primary colour."]
        for question in questions:
            before = routed(url)
            answer = chat(url, [{"role": "user", "content": question}])
            replica = next(r for r, (a, b) in enumerate(zip(routed(url), before)) if a > b)
            usage = answer["usage"]
            print(f"replica {replica}: {question!r} -> "
                  f"{answer['choices'][0]['message']['content']!r} (prompt "
                  f"{usage['prompt_tokens']} tokens, {usage['prompt_tokens_details']['cached_tokens']}"
                  f" cached)")
        print("/get_load:", bench.http_json(url + "/get_load")[1])
    finally:
        server.stop()


def two_servers_behind_the_router(folder: Path) -> None:
    print("== two servers behind sglang-router --policy cache_aware")
    env = {"OMP_NUM_THREADS": "1"}
    servers = [bench.start_server(SMALL, folder, env) for _ in range(2)]
    urls = [url for _, url in servers]
    router, router_url = bench.start_router(urls, "cache_aware", folder)
    try:
        before = [bench.http_json(u + "/health")[1]["prefill_batches"] for u in urls]
        for req in bench.shared_prefix_workload(groups=2, per_group=3, prefix_words=60, seed=1):
            answer = chat(router_url, req.messages)
            after = [bench.http_json(u + "/health")[1]["prefill_batches"] for u in urls]
            server = next(i for i, (a, b) in enumerate(zip(after, before)) if a > b)
            before = after
            usage = answer["usage"]
            print(f"group {req.group} -> server {server}: prompt {usage['prompt_tokens']} "
                  f"tokens, {usage['prompt_tokens_details']['cached_tokens']} cached")
    finally:
        router.stop()
        for server, _ in servers:
            server.stop()


def main() -> int:
    folder = Path(tempfile.mkdtemp(prefix="minisgl-ch27-"))
    one_server_two_replicas(folder)
    if bench.router_available():
        two_servers_behind_the_router(folder)
    else:
        print("sglang-router is not installed: pip install 'minisgl[router]' for part 2")
    return 0


if __name__ == "__main__":
    sys.exit(main())
