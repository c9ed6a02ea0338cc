"""The daemon's Prometheus metrics (``/metrics``): API calls, requests submitted by
outcome, and, read from the store at each scrape, elementary jobs by state and events
done. Each app has its own registry, so that several apps (tests) do not collide."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics"]


class _StoreCollector(Collector):
    def __init__(self, read: Callable[[], Mapping[str, Mapping[str, float]]]) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        data = self.read()
        jobs = GaugeMetricFamily(
            "datasched_jobs", "Elementary jobs in the store by state", labels=["state"]
        )
        for state, n in sorted(data.get("jobs", {}).items()):
            jobs.add_metric([state], n)
        yield jobs
        done = data.get("done", {})
        yield GaugeMetricFamily(
            "datasched_events_done", "Events whose results are stored", value=done.get("events", 0)
        )
        yield GaugeMetricFamily(
            "datasched_packets_done",
            "Packets whose results are stored",
            value=done.get("packets", 0),
        )


class Metrics:
    """The metrics of one app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "datasched_api_calls",
            "API calls by method and status",
            ["method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "datasched_api_latency_seconds", "API call latency", registry=self.registry
        )
        self.submitted = Counter(
            "datasched_requests_submitted",
            "Requests submitted, by outcome",
            ["state"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "datasched_rate_limited", "Calls refused by the rate limit", registry=self.registry
        )

    def watch_store(self, read: Callable[[], Mapping[str, Mapping[str, float]]]) -> None:
        """Read the store's counts at each scrape."""
        self.registry.register(_StoreCollector(read))
