"""Prometheus metrics of the server (``GET /metrics``), named as MAX names them
(``maxserve_*``): requests, tokens, latencies (time to first token, request time, time in the
queue) and the state of the model worker (requests running and waiting, KV-cache pages in use,
prefix-cache hits, preemptions). One registry per app, so several apps can live in a process."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

disable_created_metrics()  # the *_created series only double the output

_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 120000)
_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)


class _WorkerCollector:
    """Reads the worker's scheduler and KV cache at scrape time."""

    def __init__(self, state: "ServerMetrics") -> None:
        self.state = state

    def collect(self) -> Any:
        worker = self.state.worker
        if worker is None:
            return
        sched, kv = worker.scheduler, worker.pipeline.kv_manager
        m = kv.get_metrics()
        yield GaugeMetricFamily("maxserve_num_requests_running", "requests in the running batch", len(sched.running))
        yield GaugeMetricFamily("maxserve_num_requests_queued", "requests waiting for admission", len(sched.waiting))
        yield GaugeMetricFamily("maxserve_kv_cache_used_pages", "KV-cache pages in use by requests", m["used_pages"])
        yield GaugeMetricFamily("maxserve_kv_cache_total_pages", "KV-cache pages", m["total_pages"])
        yield GaugeMetricFamily("maxserve_kv_cache_cached_pages", "prefix-cache pages no request uses",
                                m.get("cached_pages", 0))
        yield CounterMetricFamily("maxserve_prefix_cache_query_tokens", "prompt tokens looked up in the prefix cache",
                                  m.get("prefix_query_tokens", 0))
        yield CounterMetricFamily("maxserve_prefix_cache_hit_tokens", "prompt tokens served from the prefix cache",
                                  m.get("prefix_hit_tokens", 0))
        yield CounterMetricFamily("maxserve_preemptions", "requests preempted (recomputed) for lack of KV pages",
                                  sched.stats.preemptions)
        yield CounterMetricFamily("maxserve_model_steps", "model steps run", sched.stats.steps)


class ServerMetrics:
    """The metric objects of one server."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.worker: Any = None
        self.requests = Counter("maxserve_request_count", "HTTP requests answered", ["path", "code"], registry=r)
        self.rejected = Counter("maxserve_requests_rejected", "requests refused because the queue was full",
                                registry=r)
        self.input_tokens = Counter("maxserve_num_input_tokens", "prompt tokens received", registry=r)
        self.output_tokens = Counter("maxserve_num_output_tokens", "tokens generated", registry=r)
        self.ttft = Histogram("maxserve_time_to_first_token_milliseconds", "time to the first generated token",
                              buckets=_MS, registry=r)
        self.request_time = Histogram("maxserve_request_time_milliseconds", "time to answer a request",
                                      buckets=_MS, registry=r)
        self.queue_time = Histogram("maxserve_queue_time_milliseconds", "time a request waits to join the batch",
                                    buckets=_MS, registry=r)
        self.itl = Histogram("maxserve_inter_token_latency_milliseconds", "time between generated tokens",
                             buckets=_MS, registry=r)
        self.batch_size = Histogram("maxserve_batch_size", "requests per model step",
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512), registry=r)
        self.input_len = Histogram("maxserve_request_input_tokens", "prompt tokens per request", buckets=_TOKENS,
                                   registry=r)
        self.output_len = Histogram("maxserve_request_output_tokens", "generated tokens per request",
                                    buckets=_TOKENS, registry=r)
        self.in_flight = Gauge("maxserve_num_requests_in_flight", "requests accepted and not yet answered",
                               registry=r)
        r.register(_WorkerCollector(self))

    def on_step(self, worker: Any, batch_size: int) -> None:
        """Called by the model thread after each loop turn."""
        if batch_size:
            self.batch_size.observe(batch_size)
        waits = worker.scheduler.stats.queue_waits
        while waits:
            self.queue_time.observe(waits.pop() * 1000)

    def render(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["ServerMetrics"]
