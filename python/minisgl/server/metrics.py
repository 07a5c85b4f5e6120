"""What the API server measures: Prometheus metrics at /metrics, and a one-line log while busy.

The names are vLLM's with its `vllm:` prefix replaced by `minisgl:`, so a dashboard or alert
written for vLLM needs only the prefix changed (SGLang's own names are given where they differ):

    minisgl:num_requests_running          gauge      requests in the decode batch (SGLang: num_running_reqs)
    minisgl:num_requests_waiting          gauge      requests queued for prefill (SGLang: num_queue_reqs)
    minisgl:kv_cache_usage_perc           gauge      share of KV pages that requests hold, 0..1
                                                     (pages only the prefix cache keeps are free
                                                     to evict, so they count as free, as in vLLM)
    minisgl:num_preemptions_total         counter    requests sent back to wait for KV memory
    minisgl:prompt_tokens_total           counter    prompt tokens, counted at the first token
    minisgl:generation_tokens_total       counter    tokens generated
    minisgl:prefix_cache_queries_total    counter    prompt tokens looked up in the prefix cache
    minisgl:prefix_cache_hits_total       counter    ... and found there (SGLang: cached_tokens_total)
    minisgl:request_success_total         counter    finished requests, by finished_reason
    minisgl:time_to_first_token_seconds   histogram  arrival at the API server -> first token
    minisgl:inter_token_latency_seconds   histogram  between two tokens of one request
    minisgl:e2e_request_latency_seconds   histogram  arrival -> last token
    minisgl:spec_decode_num_drafts_total  counter    speculative decoding (chapter 24): requests
                                                     verified, one per request and step
    minisgl:spec_decode_num_draft_tokens_total    counter  guesses verified
    minisgl:spec_decode_num_accepted_tokens_total counter  ... and accepted
    minisgl:spec_accept_length            gauge      mean tokens per request and step since the
                                                     start, 1 + accepted / drafts (SGLang's name)

Every series carries the label model_name. Times are taken here, in the API server, when a
reply reaches it: they include tokenizing, the queue and detokenizing, which is what a client
sees. The scheduler's gauges are read through the control channel when /metrics is scraped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from minisgl.utils import init_logger

from .dp import replica_metrics

logger = init_logger(__name__)

PREFIX = "minisgl:"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # Prometheus' text format
# Bucket bounds in seconds: from a fast GPU's milliseconds to a loaded CPU's minutes.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0,
                160.0, 640.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5,
               1.0, 2.5, 5.0)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0,
               1280.0)


class SchedulerGauges(Collector):
    """The scheduler's numbers as they were at the last `update` (the /metrics handler asks the
    scheduler right before it renders)."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self.stats: dict[str, int] = {}

    def update(self, stats: dict[str, int]) -> None:
        self.stats = dict(stats)

    def collect(self) -> Iterator[Metric]:
        s, labels = self.stats, [self.model_name]
        gauges = {
            "num_requests_running": ("Requests in the decode batch.", s.get("running_requests")),
            "num_requests_waiting": ("Requests waiting for prefill.", s.get("waiting_requests")),
            "kv_cache_usage_perc": ("Share of the KV pages held by requests (0..1).",
                                    kv_usage(s) if s else None),
        }
        for name, (doc, value) in gauges.items():
            family = GaugeMetricFamily(PREFIX + name, doc, labels=["model_name"])
            if value is not None:
                family.add_metric(labels, value)
            yield family
        family = CounterMetricFamily(PREFIX + "num_preemptions", "Requests sent back to wait "
                                     "for KV memory.", labels=["model_name"])
        if s:
            family.add_metric(labels, s.get("retracted", 0))
        yield family
        # >>> ch27
        yield from replica_metrics(s, self.model_name)  # per --dp-size replica (dp.py)
        # <<< ch27
        # >>> ch24
        yield from self._speculative(s, labels)

    def _speculative(self, s: dict[str, int], labels: list[str]) -> Iterator[Metric]:
        """vLLM's spec_decode counters and SGLang's accept-length gauge (chapter 24); empty
        families on a server without speculative decoding."""
        counters = {"spec_decode_num_drafts": ("Requests verified by speculative steps.",
                                               "spec_verify_reqs"),
                    "spec_decode_num_draft_tokens": ("Guessed tokens verified.",
                                                     "spec_draft_tokens"),
                    "spec_decode_num_accepted_tokens": ("Guessed tokens accepted.",
                                                        "spec_accepted_tokens")}
        drafts = s.get("spec_verify_reqs", 0)
        for name, (doc, key) in counters.items():
            family = CounterMetricFamily(PREFIX + name, doc, labels=["model_name"])
            if drafts:
                family.add_metric(labels, s.get(key, 0))
            yield family
        family = GaugeMetricFamily(PREFIX + "spec_accept_length", "Mean tokens per request "
                                   "and speculative step.", labels=["model_name"])
        if drafts:
            family.add_metric(labels, accept_length(s))
        yield family
        # <<< ch24


# >>> ch24
def accept_length(stats: dict[str, int]) -> float:
    """Tokens a speculative step gave each request on average: its accepted guesses + 1."""
    drafts = stats.get("spec_verify_reqs", 0)
    return 1 + stats.get("spec_accepted_tokens", 0) / drafts if drafts else 0.0


# <<< ch24
def kv_usage(stats: dict[str, int]) -> float:
    total = stats.get("total_pages", 0)
    return stats.get("request_pages", 0) / total if total else 0.0


class ServerMetrics:
    """The metrics of one API server, in a registry of its own (two apps in one process, as in
    tests, do not share counters). Also keeps plain totals for the busy log."""

    def __init__(self, model_name: str) -> None:
        # No `*_created` series (the time each series was made), as vLLM: nothing reads them.
        disable_created_metrics()
        self.model_name = model_name
        self.registry = CollectorRegistry()
        self.scheduler = SchedulerGauges(model_name)
        self.registry.register(self.scheduler)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(PREFIX + name, doc, ["model_name", *labels], registry=self.registry)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(PREFIX + name, doc, ["model_name"], registry=self.registry,
                             buckets=buckets)

        self.prompt_tokens = counter("prompt_tokens", "Prompt tokens (prefilled requests).")
        self.generation_tokens = counter("generation_tokens", "Generated tokens.")
        self.cache_queries = counter("prefix_cache_queries",
                                     "Prompt tokens looked up in the prefix cache.")
        self.cache_hits = counter("prefix_cache_hits", "Prompt tokens found in the prefix cache.")
        self.success = counter("request_success", "Finished requests.", "finished_reason")
        self.ttft = histogram("time_to_first_token_seconds", "Time to the first token.",
                              TTFT_BUCKETS)
        self.itl = histogram("inter_token_latency_seconds", "Time between two tokens of one "
                             "request.", ITL_BUCKETS)
        self.e2e = histogram("e2e_request_latency_seconds", "Time from arrival to the last "
                             "token.", E2E_BUCKETS)
        self.generated = 0  # the busy log's totals (reading a Counter back is clumsy)
        self.prompted = 0

    def start_request(self) -> RequestTimer:
        return RequestTimer(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class RequestTimer:
    """One request's clock: call `token()` for each new token and `finish()` once at the end.
    The prompt counts once its first token has come (it has been prefilled then)."""

    metrics: ServerMetrics
    arrived: float = field(default_factory=time.perf_counter)
    last_token: float | None = None
    done: bool = False

    def token(self, prompt_tokens: int, cached_tokens: int) -> None:
        now, m = time.perf_counter(), self.metrics
        if self.last_token is None:
            m.ttft.labels(m.model_name).observe(now - self.arrived)
            m.prompt_tokens.labels(m.model_name).inc(prompt_tokens)
            m.cache_queries.labels(m.model_name).inc(prompt_tokens)
            m.cache_hits.labels(m.model_name).inc(cached_tokens)
            m.prompted += prompt_tokens
        else:
            m.itl.labels(m.model_name).observe(now - self.last_token)
        self.last_token = now
        m.generation_tokens.labels(m.model_name).inc()
        m.generated += 1

    def finish(self, reason: str) -> None:
        """The request ended with `reason` ("stop", "length", or "abort": the client left)."""
        if self.done:
            return
        self.done, m = True, self.metrics
        m.e2e.labels(m.model_name).observe(time.perf_counter() - self.arrived)
        m.success.labels(m.model_name, reason).inc()


async def log_while_busy(metrics: ServerMetrics, ask_stats: Callable[[], Awaitable[Any]],
                         has_open_requests: Callable[[], bool], interval: float) -> None:
    """Every `interval` seconds in which anything happened, one line: token throughputs since
    the last line, the scheduler's running and waiting requests, and KV usage. Runs until
    cancelled; an idle server writes nothing."""
    last_time, last_generated, last_prompted = time.perf_counter(), 0, 0
    while True:
        await asyncio.sleep(interval)
        now, generated, prompted = time.perf_counter(), metrics.generated, metrics.prompted
        if generated == last_generated and prompted == last_prompted and \
                not has_open_requests():
            last_time = now
            continue
        try:
            stats = (await ask_stats()).info
        except TimeoutError:
            stats = {}
        logger.info(busy_line(generated - last_generated, prompted - last_prompted,
                              now - last_time, stats))
        last_time, last_generated, last_prompted = now, generated, prompted


def busy_line(generated: int, prompted: int, seconds: float, stats: dict[str, int]) -> str:
    seconds = max(seconds, 1e-9)
    line = (f"decode {generated / seconds:.1f} tok/s, prefill {prompted / seconds:.1f} tok/s "
            f"over {seconds:.1f} s")
    if not stats:
        return line + "; the scheduler did not answer"
    total = stats.get("total_pages", 0) or 1
    line = (f"{line}; running {stats.get('running_requests', 0)}, waiting "
            f"{stats.get('waiting_requests', 0)}; KV {100 * kv_usage(stats):.1f}% in use, "
            f"{100 * stats.get('cached_pages', 0) / total:.1f}% cached")
    # >>> ch24
    if stats.get("spec_verify_reqs", 0):
        line += f"; accept length {accept_length(stats):.2f}"
    # <<< ch24
    return line
