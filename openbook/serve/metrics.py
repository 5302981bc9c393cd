"""Prometheus metrics of one server (prometheus-client), in a registry of its own so that several apps
in one process (tests, benchmarks) never share counts: requests, errors, latency, batch sizes, queue
depth, dropped requests and knowledge-base swaps. ``GET /metrics`` serves them in the text format."""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


class Metrics:
    """The server's metrics (module docs)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("openbook_requests", "HTTP requests answered", ["endpoint", "method", "status"],
                                registry=r)
        self.errors = Counter("openbook_errors", "HTTP requests answered with a 4xx or 5xx status",
                              ["endpoint", "status"], registry=r)
        self.latency = Histogram("openbook_request_seconds", "time from request to response", ["endpoint"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.batch_size = Histogram("openbook_batch_size", "questions per model batch", buckets=BATCH_BUCKETS,
                                    registry=r)
        self.queue_depth = Gauge("openbook_queue_depth", "requests waiting for the model worker", registry=r)
        self.dropped = Counter("openbook_dropped", "requests dropped before computing (client gone or timed out)",
                               registry=r)
        self.swaps = Counter("openbook_kb_swaps", "knowledge-base swaps and edits installed", registry=r)

    def observe(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        if status >= 400:
            self.errors.labels(endpoint, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)
