"""Online benchmark: drive a running OpenAI-compatible server and measure what its clients see.

    python -m minisgl.benchmark.serving --base-url http://127.0.0.1:1919 \
        --num-requests 200 --request-rate 2 8 32 inf --dataset sharegpt --plot latency.png

Requests arrive as a Poisson process at each --request-rate (requests per second; inf sends
them all at once), or as fast as --max-concurrency in-flight requests allow. Each one streams,
so the client times every token: time to first token (TTFT), inter-token latency (ITL, the gaps
between tokens of one request), end-to-end latency (E2E), and over the whole run the request
throughput and output tokens per second. One table has a column per rate; --plot draws latency
against load; --result-json keeps every figure.

Prompts are random token ids sent to /v1/completions (exact lengths, no tokenizer needed; SGLang
and vLLM accept ids too), or random words for --endpoint chat. Lengths are drawn from --seed:
`random` is uniform in [len * (1 - range_ratio), len]; `sharegpt` draws log-normal lengths with
the means of the ShareGPT conversations (161 prompt and 338 output tokens, as reported in the
vLLM paper, Kwon et al. 2023) without downloading the dataset. Every request asks for exactly its
output length (max_tokens with ignore_eos, which SGLang and vLLM accept; --no-ignore-eos for
servers that do not), so runs compare like with like.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

SHAREGPT_MEAN_PROMPT, SHAREGPT_MEAN_OUTPUT = 161, 338
SHAREGPT_SIGMA = 1.0  # the spread of log-lengths: medians 98 and 205, long tails
# Token ids for random prompts: inside every common vocabulary and past the special tokens.
PROMPT_ID_RANGE = (1000, 10000)
WORDS = ("time year people way day man thing woman life child world school state family "
         "student group country problem hand part place case week company system program "
         "question work government number night point home water room mother area money story "
         "fact month lot right study book eye job word business issue side kind head house "
         "service friend father power hour game line end member law car city name team minute "
         "idea kid body information back parent face others level office door health person art "
         "war history party result change morning reason research girl guy moment air teacher "
         "force education").split()


@dataclass(frozen=True)
class Workload:
    """One request of the benchmark: its prompt and how many tokens it asks for."""

    prompt: list[int] | str
    prompt_len: int  # in tokens: exact for ids, the word count for text
    output_len: int


@dataclass
class RequestResult:
    ok: bool
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft: float = math.nan  # seconds
    e2e: float = math.nan
    itls: list[float] = field(default_factory=list)
    error: str = ""


@dataclass
class RunSummary:
    """The figures of one run (one request rate or concurrency)."""

    label: str
    request_rate: float
    max_concurrency: int | None
    completed: int
    failed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float  # requests per second
    output_throughput: float  # output tokens per second
    ttft_ms: dict[str, float]
    itl_ms: dict[str, float]
    e2e_ms: dict[str, float]
    errors: list[str] = field(default_factory=list)


def sample_lengths(rng: random.Random, dataset: str, n: int, input_len: int, output_len: int,
                   range_ratio: float, max_len: int) -> list[tuple[int, int]]:
    """(prompt, output) lengths of n requests; prompt + output <= max_len."""
    if dataset == "random":
        def uniform(length: int) -> int:
            return rng.randint(max(1, int(length * (1 - range_ratio))), length)
        pairs = [(uniform(input_len), uniform(output_len)) for _ in range(n)]
    elif dataset == "sharegpt":
        def lognormal(mean: float) -> int:  # mu chosen so that the mean is `mean`
            return max(4, round(rng.lognormvariate(math.log(mean) - SHAREGPT_SIGMA ** 2 / 2,
                                                   SHAREGPT_SIGMA)))
        pairs = []
        while len(pairs) < n:  # as vLLM's ShareGPT sampling, drop pairs that do not fit
            pair = (lognormal(SHAREGPT_MEAN_PROMPT), lognormal(SHAREGPT_MEAN_OUTPUT))
            if sum(pair) <= max_len:
                pairs.append(pair)
    else:
        raise ValueError(f"unknown dataset {dataset!r}")
    if any(p + o > max_len for p, o in pairs):
        raise ValueError(f"--input-len + --output-len must be at most --max-len ({max_len})")
    return pairs


def make_workloads(rng: random.Random, lengths: list[tuple[int, int]], text: bool
                   ) -> list[Workload]:
    if text:
        return [Workload(" ".join(rng.choice(WORDS) for _ in range(p)), p, o) for p, o in lengths]
    return [Workload([rng.randrange(*PROMPT_ID_RANGE) for _ in range(p)], p, o)
            for p, o in lengths]


def arrival_times(rng: random.Random, n: int, rate: float) -> list[float]:
    """Send times in seconds from the start: a Poisson process (exponential gaps) at `rate`
    requests per second; all at 0 for rate inf."""
    if math.isinf(rate):
        return [0.0] * n
    times, now = [], 0.0
    for _ in range(n):
        times.append(now)
        now += rng.expovariate(rate)
    return times


def percentiles(values: list[float]) -> dict[str, float]:
    """mean, median, p90, p99 (numpy's linear interpolation), in milliseconds; NaN if empty."""
    if not values:
        return {k: math.nan for k in ("mean", "median", "p90", "p99")}
    ms = np.asarray(values, dtype=np.float64) * 1000
    return {"mean": float(ms.mean()), "median": float(np.percentile(ms, 50)),
            "p90": float(np.percentile(ms, 90)), "p99": float(np.percentile(ms, 99))}


def summarize(label: str, rate: float, concurrency: int | None, results: list[RequestResult],
              duration: float) -> RunSummary:
    done = [r for r in results if r.ok]
    out_tokens = sum(r.output_tokens for r in done)
    return RunSummary(
        label=label, request_rate=rate, max_concurrency=concurrency, completed=len(done),
        failed=len(results) - len(done), duration_s=duration,
        total_input_tokens=sum(r.prompt_tokens for r in done), total_output_tokens=out_tokens,
        request_throughput=len(done) / duration, output_throughput=out_tokens / duration,
        ttft_ms=percentiles([r.ttft for r in done]),
        itl_ms=percentiles([gap for r in done for gap in r.itls]),
        e2e_ms=percentiles([r.e2e for r in done]),
        errors=sorted({r.error for r in results if not r.ok})[:5])


async def stream_chunks(http: Any, path: str, body: dict) -> Any:
    """The JSON chunks of one streamed (server-sent events) response, as dicts.

    Parsed by hand rather than with the openai client: its typed chunk objects cost about
    0.2 ms each in Python, and one client process then tops out near 5,000 chunks per second
    (measured against a server that streams as fast as it can), which is below what the
    engine serves: the benchmark would be measuring itself."""
    async with http.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            detail = (await response.aread()).decode(errors="replace")[:200]
            raise RuntimeError(f"HTTP {response.status_code}: {detail}")
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators and comments
            data = line[5:].strip()
            if data == "[DONE]":
                return
            yield json.loads(data)


async def one_request(http: Any, args: argparse.Namespace, model: str, work: Workload
                      ) -> RequestResult:
    """Send one streaming request and time its chunks."""
    body: dict[str, Any] = {"model": model, "max_tokens": work.output_len,
                            "temperature": args.temperature, "stream": True,
                            "stream_options": {"include_usage": True}}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.endpoint == "chat":
        path, body["messages"] = "/v1/chat/completions", [{"role": "user", "content": work.prompt}]
    else:
        path, body["prompt"] = "/v1/completions", work.prompt
    start = time.perf_counter()
    result, last = RequestResult(ok=False), None
    try:
        async for chunk in stream_chunks(http, path, body):
            if chunk.get("usage"):
                result.prompt_tokens = chunk["usage"]["prompt_tokens"]
                result.output_tokens = chunk["usage"]["completion_tokens"]
            if not chunk.get("choices"):
                continue
            choice = chunk["choices"][0]
            text = (choice.get("delta") or {}).get("content") if args.endpoint == "chat" \
                else choice.get("text")
            if not text:
                continue
            now = time.perf_counter()
            if last is None:
                result.ttft = now - start
            else:
                result.itls.append(now - last)
            last = now
        result.e2e = time.perf_counter() - start
        result.ok = last is not None
        if not result.ok:
            result.error = "the stream held no text"
    except Exception as e:  # counted as failed and shown in the table
        result.error = f"{type(e).__name__}: {str(e)[:200]}"
    return result


async def run_once(client: Any, args: argparse.Namespace, model: str, workloads: list[Workload],
                   rate: float, seed: int) -> RunSummary:
    """All workloads at one request rate (and the concurrency cap, if any)."""
    times = arrival_times(random.Random(seed), len(workloads), rate)
    gate = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
    label = f"{rate:g} req/s" + (f", <= {args.max_concurrency}" if gate else "")
    bar = tqdm(total=len(workloads), desc=label, disable=args.no_progress, leave=False,
               file=sys.stderr)
    start = time.perf_counter()

    async def send(at: float, work: Workload) -> RequestResult:
        await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
        if gate is None:
            result = await one_request(client, args, model, work)
        else:
            async with gate:
                result = await one_request(client, args, model, work)
        bar.update(1)
        return result

    results = await asyncio.gather(*[send(t, w) for t, w in zip(times, workloads)])
    duration = time.perf_counter() - start
    bar.close()
    return summarize(label, rate, args.max_concurrency, list(results), duration)


def table(runs: list[RunSummary]) -> str:
    """One column per run, one row per figure."""
    rows: list[tuple[str, list[str]]] = [
        ("request rate (req/s)", [f"{r.request_rate:g}" for r in runs]),
        ("max concurrency", [str(r.max_concurrency or "-") for r in runs]),
        ("completed / failed", [f"{r.completed} / {r.failed}" for r in runs]),
        ("duration (s)", [f"{r.duration_s:.2f}" for r in runs]),
        ("input tokens", [str(r.total_input_tokens) for r in runs]),
        ("output tokens", [str(r.total_output_tokens) for r in runs]),
        ("request throughput (req/s)", [f"{r.request_throughput:.2f}" for r in runs]),
        ("output throughput (tok/s)", [f"{r.output_throughput:.1f}" for r in runs]),
    ]
    for name, attr in (("TTFT", "ttft_ms"), ("ITL", "itl_ms"), ("E2E", "e2e_ms")):
        for stat in ("mean", "median", "p90", "p99"):
            rows.append((f"{name} {stat} (ms)", [f"{getattr(r, attr)[stat]:.1f}" for r in runs]))
    width = max(len(name) for name, _ in rows)
    cols = [max(len(r.label), *(len(v[i]) for _, v in rows)) for i, r in enumerate(runs)]
    lines = [" " * width + "  " + "  ".join(r.label.rjust(c) for r, c in zip(runs, cols))]
    lines.append("-" * len(lines[0]))
    for name, values in rows:
        lines.append(name.ljust(width) + "  " + "  ".join(v.rjust(c)
                                                          for v, c in zip(values, cols)))
    return "\n".join(lines)


def plot(runs: list[RunSummary], path: Path, title: str) -> None:
    """Latency (median and p99 of TTFT, ITL, E2E) against the achieved request throughput."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    x = [r.request_throughput for r in runs]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4), constrained_layout=True)
    for ax, (name, attr) in zip(axes, (("TTFT", "ttft_ms"), ("ITL", "itl_ms"),
                                       ("E2E latency", "e2e_ms"))):
        for stat, style in (("median", "o-"), ("p99", "s--")):
            ax.plot(x, [getattr(r, attr)[stat] for r in runs], style, label=stat)
        for r in runs:
            ax.annotate(f"{r.request_rate:g}", (r.request_throughput, getattr(r, attr)["median"]),
                        textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.set_title(name)
        ax.set_xlabel("achieved request throughput (req/s)")
        ax.set_ylabel("ms")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title + "  (points labelled with the offered rate)")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m minisgl.benchmark.serving",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--base-url", default="http://127.0.0.1:1919", help="the server, without /v1")
    p.add_argument("--model", default=None, help="None: the first model of /v1/models")
    p.add_argument("--api-key", default="none", help="sent as 'Authorization: Bearer KEY'")
    p.add_argument("--endpoint", choices=["completions", "chat"], default="completions",
                   help="completions sends token ids; chat sends words")
    p.add_argument("--dataset", choices=["random", "sharegpt"], default="random",
                   help="how prompt and output lengths are drawn (the prompts are random tokens "
                        "either way): random is uniform in [len * (1 - range_ratio), len] of "
                        "--input-len/--output-len; sharegpt is synthetic, log-normal lengths "
                        "shaped like ShareGPT's conversations (means 161 prompt and 338 output "
                        "tokens, from the vLLM paper): no ShareGPT data is downloaded or read")
    p.add_argument("--num-requests", type=int, default=200, help="requests per rate")
    p.add_argument("--request-rate", type=float, nargs="+", default=[math.inf],
                   help="one or more Poisson arrival rates in requests/s (inf: all at once)")
    p.add_argument("--max-concurrency", type=int, default=None,
                   help="at most this many requests in flight (None: no cap)")
    p.add_argument("--input-len", type=int, default=512, help="random: longest prompt")
    p.add_argument("--output-len", type=int, default=128, help="random: longest output")
    p.add_argument("--range-ratio", type=float, default=0.0,
                   help="random: lengths uniform in [len * (1 - ratio), len]")
    p.add_argument("--max-len", type=int, default=2048,
                   help="prompt + output tokens at most (sharegpt draws again above it)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--no-ignore-eos", dest="ignore_eos", action="store_false",
                   help="do not send ignore_eos (answers may end before their output length)")
    p.add_argument("--seed", type=int, default=0, help="lengths, prompts and arrivals")
    p.add_argument("--warmup", type=int, default=2, help="requests sent before the runs")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG of latency vs load")
    p.add_argument("--result-json", type=Path, default=None, help="write every figure as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def check_args(args: argparse.Namespace) -> None:
    problems = []
    if args.num_requests < 1:
        problems.append("--num-requests must be >= 1")
    if any(not (r > 0) for r in args.request_rate):  # also NaN
        problems.append("every --request-rate must be > 0 (inf for all at once)")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        problems.append("--max-concurrency must be >= 1")
    if min(args.input_len, args.output_len, args.max_len) < 1:
        problems.append("--input-len, --output-len and --max-len must be >= 1")
    if not 0 <= args.range_ratio < 1:
        problems.append("--range-ratio must be in [0, 1)")
    if not 0 <= args.temperature <= 2:
        problems.append("--temperature must be in [0, 2]")
    if problems:
        raise SystemExit("error: " + "; ".join(problems))


def http_client(base_url: str, api_key: str | None = None, timeout: float = 600.0) -> Any:
    """An async HTTP client for stream_chunks. No cap on connections: at rate inf every request
    is in flight at once, and a request waiting for a pooled connection would count the wait as
    time to first token."""
    import httpx2  # the HTTP library under the openai client, without its chunk objects

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx2.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout,
                              limits=httpx2.Limits(max_connections=None))


async def first_model(http: Any) -> str:
    """The first model the server lists at /v1/models."""
    listing = await http.get("/v1/models")
    if listing.status_code != 200:
        raise SystemExit(f"error: GET /v1/models answered HTTP {listing.status_code}: "
                         f"{listing.text[:200]}")
    return listing.json()["data"][0]["id"]


async def main_async(args: argparse.Namespace) -> list[RunSummary]:
    async with http_client(args.base_url, args.api_key, args.timeout) as client:
        model = args.model or await first_model(client)
        rng = random.Random(args.seed)
        lengths = sample_lengths(rng, args.dataset, args.num_requests, args.input_len,
                                 args.output_len, args.range_ratio, args.max_len)
        workloads = make_workloads(rng, lengths, text=args.endpoint == "chat")
        print(f"model {model} at {args.base_url}; {args.num_requests} requests per rate, "
              f"{args.dataset} lengths: prompt mean {np.mean([p for p, _ in lengths]):.0f}, "
              f"output mean {np.mean([o for _, o in lengths]):.0f} tokens", flush=True)
        for work in workloads[: args.warmup]:
            warm = await one_request(client, args, model, Workload(work.prompt, work.prompt_len,
                                                                  min(work.output_len, 4)))
            if not warm.ok:
                raise SystemExit(f"error: the warm-up request failed: {warm.error}")
        runs = []
        for i, rate in enumerate(args.request_rate):
            runs.append(await run_once(client, args, model, workloads, rate, args.seed + i))
            run = runs[-1]
            print(f"{run.label}: {run.completed} done, {run.failed} failed in "
                  f"{run.duration_s:.1f} s; {run.output_throughput:.1f} output tok/s", flush=True)
        return runs


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    runs = asyncio.run(main_async(args))
    print(table(runs))
    for run in runs:
        for error in run.errors:
            print(f"{run.label}: failed: {error}")
    if args.result_json is not None:
        args.result_json.write_text(json.dumps({"args": {k: str(v) for k, v in
                                                         vars(args).items()},
                                                "runs": [asdict(r) for r in runs]}, indent=1))
        print(f"wrote {args.result_json}")
    if args.plot is not None:
        plot(runs, args.plot, f"{args.base_url} · {args.dataset} · {args.num_requests} requests")
        print(f"wrote {args.plot}")
    return 0 if all(r.failed == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
