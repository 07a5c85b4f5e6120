"""The server against the offline engine on one workload: same greedy tokens, and how much the
process pipeline (HTTP, tokenizer, ZeroMQ, detokenizer) costs in throughput.

    python benchmarks/serving.py [--model Qwen/Qwen3-0.6B --dummy-weight] [--clients 64]

1. LLM.generate (this process) answers the workload: greedy tokens and offline tokens/s.
2. `python -m minisgl` on the same model: each prompt alone through /generate must give the
   same tokens; then every prompt at once from concurrent streaming OpenAI clients; tokens/s.
3. SIGTERM: the server exits 0 and leaves no process.
Prints one line per check and the ratio server / offline; exits 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

import openai
import psutil
import torch

from minisgl.core import SamplingParams
from minisgl.llm import LLM

FAILED: list[str] = []


def check(name: str, ok: bool) -> None:
    print(f"{'ok  ' if ok else 'FAIL'} {name}", flush=True)
    if not ok:
        FAILED.append(name)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return json.load(resp)


def start_server(args: argparse.Namespace, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "minisgl", "--model", args.model, "--port", str(port),
           "--num-pages", str(args.num_pages), "--max-seq-len", "2048"]
    cmd += ["--dummy-weight"] if args.dummy_weight else []
    proc = subprocess.Popen(cmd)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).read()
            return proc
        except OSError:
            time.sleep(0.5)
    sys.exit("the server did not start")


def stream_all(base: str, model: str, prompts: list[list[int]], max_tokens: int) -> int:
    """Every prompt at once, one thread and one streaming client each; tokens received."""
    counts: list[int] = []
    errors: list[str] = []

    def one(ids: list[int]) -> None:
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0,
                               timeout=600)
        try:
            stream = client.completions.create(model=model, prompt=ids, max_tokens=max_tokens,
                                               temperature=0, stream=True,
                                               stream_options={"include_usage": True},
                                               extra_body={"ignore_eos": True})
            usage = [c.usage for c in stream if c.usage]
            counts.append(usage[-1].completion_tokens)
        except Exception as e:  # reported below
            errors.append(f"{type(e).__name__}: {e}")

    threads = [threading.Thread(target=one, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(f"{len(prompts)} concurrent streams finished without errors {errors[:2]}", not errors)
    return sum(counts)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="Qwen/Qwen3-0.6B")
    p.add_argument("--dummy-weight", action="store_true")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--num-pages", type=int, default=65536)
    args = p.parse_args()
    rng = random.Random(0)

    llm = LLM(args.model, dummy_weight=args.dummy_weight, num_pages=args.num_pages,
              max_seq_len=2048)
    vocab = llm.tokenizer.vocab_size
    prompts = [[rng.randrange(1000, vocab - 1000) for _ in range(rng.randint(32, 256))]
               for _ in range(args.clients)]
    greedy = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    alone = [llm.generate([ids], greedy, use_tqdm=False)[0]["token_ids"] for ids in prompts[:4]]
    llm.generate(prompts[:8], greedy, use_tqdm=False)  # warm-up
    start = time.perf_counter()
    out = llm.generate(prompts, greedy, use_tqdm=False)
    offline_s = time.perf_counter() - start
    offline_tokens = sum(len(r["token_ids"]) for r in out)
    llm.shutdown()
    del llm
    torch.cuda.empty_cache() if torch.cuda.is_available() else None

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    server = start_server(args, port)
    family = [psutil.Process(server.pid), *psutil.Process(server.pid).children(recursive=True)]
    try:
        model = json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
        for i, ids in enumerate(prompts[:4]):
            got = post(base + "/generate", {"input_ids": ids, "sampling_params": {
                "max_new_tokens": args.max_tokens, "temperature": 0,
                "ignore_eos": True}})["output_ids"]
            check(f"prompt {i} alone: server tokens == LLM.generate tokens", got == alone[i])
        stream_all(base, model, prompts[:8], args.max_tokens)  # warm-up
        start = time.perf_counter()
        served_tokens = stream_all(base, model, prompts, args.max_tokens)
        served_s = time.perf_counter() - start
        stats = json.load(urllib.request.urlopen(base + "/health"))
        check(f"after the load no request holds pages ({stats})",
              stats["request_pages"] == 0 and stats["running_requests"] == 0)
    finally:
        server.send_signal(signal.SIGTERM)
        code = server.wait(120)
    check("SIGTERM: exit code 0", code == 0)
    check("SIGTERM: no process left", not psutil.wait_procs(family, timeout=30)[1])
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    off, srv = offline_tokens / offline_s, served_tokens / served_s
    print(f"device {device}; {args.clients} requests x {args.max_tokens} tokens, prompts 32-256")
    print(f"offline LLM.generate: {offline_tokens} tokens in {offline_s:.2f} s = {off:.0f} tok/s")
    print(f"server, {args.clients} streaming clients: {served_tokens} tokens in {served_s:.2f} s "
          f"= {srv:.0f} tok/s")
    print(f"ratio server / offline: {srv / off:.2f}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
