"""/health, /ready, /metrics: for load balancers, orchestrators and Prometheus. No API key needed; /ready and /metrics
answer a loopback client, or one sending JUIZ_METRICS_KEY (they show workers, the model and every tenant's volume)."""

from __future__ import annotations

from litestar import Controller, Response, get
from litestar.datastructures import State
from litestar.di import NamedDependency
from litestar.openapi import ResponseSpec
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from redis.exceptions import RedisError

from juiz import __version__
from juiz.store import Store
from schemas import HealthView, ReadyView
from service.edge import operations_guard
from service.metrics import live_workers, store_writable
from service.openapi import responses


class HealthController(Controller):
    path = "/"
    tags = ["operations"]  # noqa: RUF012 - Litestar reads it as a class attribute

    @get("/health", operation_id="health", summary="Process is up")
    async def health(self) -> HealthView:
        """200 while the API process runs; checks nothing else."""
        return HealthView(status="ok", version=__version__)

    @get(
        "/ready",
        operation_id="ready",
        sync_to_thread=True,
        guards=[operations_guard],
        responses={
            **responses(401, 403),
            503: ResponseSpec(
                data_container=ReadyView,
                description="Not ready: Redis unreachable or refusing writes, or no live worker; `reason` says which.",
                generate_examples=False,
            ),
        },
        summary="Ready to grade",
    )
    def ready(self, store: NamedDependency[Store]) -> Response[ReadyView]:
        """200 when Redis answers and takes writes and at least one live worker listens to our queues (each with
        its model); 503 otherwise, with the reason."""
        try:
            store.ping()
        except RedisError as exc:
            view = ReadyView(ready=False, redis=False, workers=[], reason=f"Redis unreachable: {type(exc).__name__}")
            return Response(view, status_code=503)
        workers = live_workers(store)
        if not store_writable(store):
            reason = "Redis refuses writes (full, read-only or unable to persist): batches wait, submissions get 507"
            return Response(
                ReadyView(ready=False, redis=True, writable=False, workers=workers, reason=reason), status_code=503
            )
        if not workers:
            view = ReadyView(ready=False, redis=True, writable=True, workers=[], reason="no live worker on the queues")
            return Response(view, status_code=503)
        return Response(ReadyView(ready=True, redis=True, writable=True, workers=workers))

    @get(
        "/metrics",
        operation_id="metrics",
        sync_to_thread=True,
        guards=[operations_guard],
        responses=responses(401, 403),
        summary="Prometheus metrics",
        media_type=CONTENT_TYPE_LATEST,
    )
    def metrics(self, state: State) -> bytes:
        """Queue depth, items graded by status, judgements/s, latency histograms and workers, read from Redis now;
        then this API process's own: HTTP requests and durations per route (juiz_http_*), CPU, memory."""
        return generate_latest(state.metrics_registry) + generate_latest(REGISTRY)
