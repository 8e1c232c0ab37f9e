"""The Litestar application factory.

`create_app(settings, redis)` takes its resources as arguments (tests pass their own Redis); given none, it reads
the settings from the environment and opens a Redis connection in the app's lifespan.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import HTTPException
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from juiz.settings import Settings
from juiz.store import Store
from service.auth import provide_tenant
from service.controllers import BatchController, GradeController, HealthController
from service.controllers.compare import CompareController
from service.controllers.items import ItemController
from service.errors import EXCEPTION_HANDLERS
from service.metrics import HTTP_METRICS, registry_for
from service.openapi import assets_router, document_limits, forbid_extra_fields, openapi_config
from service.ratelimit import enforce_rate_limit
from service.ui import ui_router
from service.ui.router import http_exception

log = logging.getLogger(__name__)


def provide_store(state: State) -> Store:
    return state.store  # type: ignore[no-any-return]


def create_app(settings: Settings | None = None, redis: Redis | None = None) -> Litestar:
    """The API. `redis` must not decode responses (RQ needs bytes); it is the caller's to close when given."""
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def redis_connection(app: Litestar) -> AsyncIterator[None]:
        client = redis if redis is not None else Redis.from_url(settings.redis_url)
        store = Store(client, settings)
        app.state.store = store
        # The hot read paths (result pages, rate limits) talk to Redis on the event loop instead of a worker thread.
        app.state.async_redis = AsyncRedis.from_url(settings.redis_url)
        app.state.metrics_registry = registry_for(store)
        if not app.state.tenants_by_key:
            log.warning("no API keys configured (JUIZ_API_KEYS): the API is open to anyone who can reach it")
        try:
            yield
        finally:
            await app.state.async_redis.aclose()
            if redis is None:
                client.close()

    return Litestar(
        route_handlers=[
            BatchController,
            GradeController,
            HealthController,
            ItemController,  # manual labels (issue 11)
            CompareController,  # two runs side by side (issue 18)
            assets_router(),
            ui_router(),  # the web page under /ui (issue 11)
        ],
        dependencies={
            "store": Provide(provide_store, sync_to_thread=False),
            "tenant": Provide(provide_tenant, sync_to_thread=False),
        },
        exception_handlers={**EXCEPTION_HANDLERS, HTTPException: http_exception},  # /ui paths: HTML errors
        before_request=enforce_rate_limit,
        middleware=[HTTP_METRICS.middleware],
        on_startup=[forbid_extra_fields, document_limits],
        lifespan=[redis_connection],
        state=State({"settings": settings, "tenants_by_key": settings.tenants_by_key}),
        request_max_body_size=settings.max_body_bytes,
        openapi_config=openapi_config(),
    )
