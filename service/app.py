"""The Litestar application factory.

`create_app(settings, redis)` takes its resources as arguments (tests pass their own Redis); given none, it reads
the settings from the environment and opens a Redis connection in the app's lifespan.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request
from litestar.datastructures import State
from litestar.di import Provide
from litestar.exceptions import HTTPException
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from juiz.runtime.settings import Settings
from juiz.store import Store
from juiz.store.connection import async_redis_client, redis_client
from service.auth import provide_annotator, provide_tenant
from service.controllers import BatchController, GradeController, HealthController
from service.controllers.compare import CompareController
from service.controllers.items import ItemController
from service.controllers.labels import LabelsController
from service.controllers.labelsets import LabelledSetController
from service.edge import (
    index_query_parameters,
    refuse_unknown_query_parameters,
    security_headers_middleware,
)
from service.errors import EXCEPTION_HANDLERS
from service.intake import JsonRequest
from service.metrics import HTTP_METRICS, registry_for
from service.openapi import assets_router, document_limits, forbid_extra_fields, openapi_config
from service.ratelimit import enforce_rate_limit
from service.ui import ui_router
from service.ui.router import http_exception, redis_down
from service.ui.session import SESSION_STORE, session_store

log = logging.getLogger(__name__)


def provide_store(state: State) -> Store:
    return state.store  # type: ignore[no-any-return]


async def before_request(request: Request[Any, Any, Any]) -> None:
    """Rate limit first (a flood of bad requests is still counted), then unknown query parameters."""
    await enforce_rate_limit(request)
    await refuse_unknown_query_parameters(request)


def create_app(settings: Settings | None = None, redis: Redis | None = None) -> Litestar:
    """The API. `redis` must not decode responses (RQ needs bytes); it is the caller's to close when given."""
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def redis_connection(app: Litestar) -> AsyncIterator[None]:
        client = redis if redis is not None else redis_client(settings)
        # The hot read paths (result pages, rate limits) talk to Redis on the event loop instead of a worker thread.
        app.state.async_redis = async_redis_client(settings)
        store = Store(client, settings, app.state.async_redis)
        app.state.store = store
        # The web page's sessions: Litestar's RedisStore on that client (service.ui.session).
        app.stores.register(SESSION_STORE, session_store(app.state.async_redis), allow_override=True)
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
            ItemController,  # manual labels
            CompareController,  # two runs side by side
            LabelsController,  # the labelled set: the team's labels per triple
            LabelledSetController,  # named labelled sets, and runs of them
            assets_router(),
            ui_router(settings),  # the web page under /ui
        ],
        dependencies={
            "store": Provide(provide_store, sync_to_thread=False),
            "tenant": Provide(provide_tenant, sync_to_thread=False),
            "annotator": Provide(provide_annotator, sync_to_thread=False),
        },
        exception_handlers={
            **EXCEPTION_HANDLERS,
            HTTPException: http_exception,  # /ui paths: HTML errors
            RedisConnectionError: redis_down,  # /ui paths: an HTML page
            RedisTimeoutError: redis_down,
        },
        before_request=before_request,
        middleware=[security_headers_middleware, HTTP_METRICS.middleware],
        on_startup=[forbid_extra_fields, document_limits, index_query_parameters],
        lifespan=[redis_connection],
        state=State(
            {
                "settings": settings,
                "tenants_by_key": settings.tenants_by_key,
                "annotators_by_key": settings.annotators_by_key,
            }
        ),
        request_max_body_size=settings.max_body_bytes,
        request_class=JsonRequest,  # typed bodies read by juiz's strict JSON reader
        openapi_config=openapi_config(),
    )
