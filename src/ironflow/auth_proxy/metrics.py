"""Prometheus metrics of one proxy app: requests by result, upstream latency, streams, tokens.

Each app owns its own ``CollectorRegistry`` so several apps (replicas in one test
process) never share counters. Label children are cached: the hot path does one dict
lookup and one increment.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "ProxyMetrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ProxyMetrics:
    """The four metric families of ``/metrics``."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._requests = Counter(
            "ironflow_auth_proxy_requests",
            "Requests handled, by result (and proxied secret name for /r/).",
            ["result", "secret"],
            registry=self.registry,
        )
        self.upstream_latency = Histogram(
            "ironflow_auth_proxy_upstream_latency_seconds",
            "Time from sending a request upstream to its response headers.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.open_streams = Gauge(
            "ironflow_auth_proxy_open_streams", "Responses being streamed right now.", registry=self.registry
        )
        self.live_tokens = Gauge(
            "ironflow_auth_proxy_live_tokens", "Grants in the registry (read at scrape).", registry=self.registry
        )
        self._children: dict[tuple[str, str], Counter] = {}

    def count(self, result: str, secret: str = "") -> None:
        key = (result, secret)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = self._requests.labels(result=result, secret=secret)
        child.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
