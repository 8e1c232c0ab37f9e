"""Prometheus metrics, collected from Redis at scrape time: the workers are other processes (often other machines),
so every API replica reports the same cluster-wide figures.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from litestar.plugins.prometheus import PrometheusConfig
from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector, CollectorRegistry
from redis.exceptions import ResponseError

from juiz.runtime.retry import write_refused
from juiz.store import ENGINE_CALL_BUCKETS, ITEM_BUCKETS, Store
from juiz.store.sweeper import stalled_batches
from schemas import WorkerView

STATUSES = ("ok", "parse_error", "failed")

# Litestar's Prometheus middleware: requests, durations and in-flight requests of this API process, per route
# template (group_path: a batch id never becomes a label), in prometheus_client's default registry, which /metrics
# serves after the cluster-wide figures read from Redis.
HTTP_METRICS = PrometheusConfig(app_name="juiz", prefix="juiz_http", group_path=True, exclude=["/metrics", "/schema"])


# This API process's answers to Redis refusing writes (full, read-only, MISCONF), in the default registry.
STORE_REFUSED = Counter(
    "juiz_store_refused_writes", "Requests answered 507/503 because Redis refused a write.", labelnames=["reason"]
)
RATE_LIMIT_FAILED_OPEN = Counter(
    "juiz_rate_limit_failed_open", "Requests let through uncounted because Redis refused the rate limit's write."
)


def live_workers(store: Store) -> list[WorkerView]:
    """RQ workers listening to our queues, with the model each announced (juiz.store.queues)."""
    return store.jobs.workers()


def store_writable(store: Store) -> bool:
    try:
        store.check_writable()
    except ResponseError as exc:
        if write_refused(exc):
            return False
        raise
    return True


class RedisCollector(Collector):
    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Any]:
        store = self.store
        settings = store.settings
        depth = GaugeMetricFamily("juiz_queue_jobs", "Chunk jobs waiting in each queue.", labels=["queue"])
        started = GaugeMetricFamily("juiz_jobs_started", "Chunk jobs being run now.", labels=["queue"])
        pending = GaugeMetricFamily("juiz_chunks_pending", "Chunks not yet fully graded.", labels=["queue"])
        for name in settings.queues:
            queue = store.rq_queue(name)
            depth.add_metric([name], queue.count)
            # cleanup=False: cleaning would run abandoned-job handling (and its callbacks) in the API process.
            started.add_metric([name], queue.started_job_registry.get_job_count(cleanup=False))
            pending.add_metric([name], store.pending_chunk_count(name))
        yield from (depth, started, pending)

        counters = store.counters()
        graded = CounterMetricFamily("juiz_items_graded", "Items stored, by status.", labels=["status"])
        for status in STATUSES:
            graded.add_metric([status], counters.get(f"items_{status}", 0))
        yield graded
        yield CounterMetricFamily(
            "juiz_cache_hits", "Items answered from the result cache.", value=counters.get("cache_hits", 0)
        )
        yield CounterMetricFamily("juiz_batches", "Batches created.", value=counters.get("batches_created", 0))
        yield CounterMetricFamily(
            "juiz_engine_calls", "Engine calls made by workers.", value=counters.get("engine_calls", 0)
        )
        yield CounterMetricFamily(
            "juiz_chunks_swept",
            "Chunks the sweeper found with no job to grade them and queued again.",
            value=counters.get("chunks_swept", 0),
        )
        yield GaugeMetricFamily(
            "juiz_batches_stalled",
            "Batches the last sweep found with chunks no job would grade (requeued by it): a stuck-batch alarm.",
            value=stalled_batches(store),
        )
        yield GaugeMetricFamily(
            "juiz_judgements_per_second",
            "Items stored per second over the last minute.",
            value=store.judgements_per_second(),
        )
        for name, buckets, help_text in (
            ("engine_call_seconds", ENGINE_CALL_BUCKETS, "Duration of one engine call (a coalesced set of chunks)."),
            ("item_seconds", ITEM_BUCKETS, "Time from a batch's submission to an item's result being stored."),
        ):
            cumulative, total, _count = store.histogram(name, buckets)
            histogram = HistogramMetricFamily(f"juiz_{name}", help_text)
            histogram.add_metric([], cumulative, total)
            yield histogram

        workers = live_workers(store)
        yield GaugeMetricFamily("juiz_workers", "Live workers on our queues.", value=len(workers))
        info = GaugeMetricFamily(
            "juiz_worker_info", "One per live worker, with its model.", labels=["worker", "model", "state"]
        )
        for worker in workers:
            info.add_metric([worker.name, worker.model or "", worker.state], 1)
        yield info
        yield GaugeMetricFamily(
            "juiz_store_writable",
            "1 when Redis takes a write, 0 when it refuses them (full, read-only, MISCONF): workers wait.",
            value=store_writable(store),
        )
        seen = GaugeMetricFamily("juiz_scrape_timestamp_seconds", "When these figures were read from Redis.")
        seen.add_metric([], datetime.now(UTC).timestamp())
        yield seen


def registry_for(store: Store) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RedisCollector(store))
    return registry
