"""Per-tenant rate limits on every route that creates or reads work: all of /v1, and the web page's upload
(`WORK_PAGES`): `rate_limit_per_minute` requests per tenant per minute, counted in Redis (juiz.store.ratelimit) so
every API replica shares the count; over it, 429 with `Retry-After`.

Litestar's RateLimitMiddleware keys by client address and keeps a request log it reads and rewrites under one
process-wide lock (two round trips per request, and not atomic across replicas); a fixed one-minute window counted
with INCR is one atomic round trip, which matters on the polling path's p99.

When Redis refuses the count's write (full, read-only), the limit fails open: a GET of results must not fail because
the counter can't be written. Each such request is counted in `juiz_rate_limit_failed_open_total` and logged.
"""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request
from litestar.exceptions import HTTPException
from redis.exceptions import ResponseError

from juiz.runtime.retry import write_refused
from juiz.store import Store
from juiz.store.ratelimit import WINDOW_S
from service.auth import tenant_for
from service.metrics import RATE_LIMIT_FAILED_OPEN
from service.views import API_PREFIX

__all__ = ["WINDOW_S", "enforce_rate_limit", "rate_key"]

log = logging.getLogger(__name__)

# The web page's routes that create work, counted with the API's: an upload is a POST /v1/batches by another door.
WORK_PAGES = frozenset({("POST", "/ui/batches")})


def counted(request: Request[Any, Any, Any]) -> bool:
    return request.url.path.startswith(API_PREFIX) or (request.method, request.url.path.rstrip("/")) in WORK_PAGES


def rate_key(request: Request[Any, Any, Any]) -> str:
    """Who is counted: the caller's tenant (its API key, or the page's signed-in session); without one (open API,
    wrong key) the client address, so that guessing keys is limited too."""
    tenants_by_key: dict[str, str] = request.app.state.tenants_by_key
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if tenants_by_key and scheme.lower() == "bearer" and token.strip():
        tenant = tenant_for(token.strip(), tenants_by_key)
        if tenant is not None:
            return f"tenant:{tenant}"
    if not request.url.path.startswith(API_PREFIX) and "session" in request.scope:
        tenant = request.session.get("tenant")
        if isinstance(tenant, str) and (not tenants_by_key or tenant in tenants_by_key.values()):
            return f"tenant:{tenant}"
    return f"client:{request.client.host if request.client else 'unknown'}"


async def enforce_rate_limit(request: Request[Any, Any, Any]) -> None:
    """Litestar before_request hook (app-wide; /v1 and `WORK_PAGES` count): 429 when the caller's window is used
    up."""
    limit: int = request.app.state.settings.rate_limit_per_minute
    if limit <= 0 or not counted(request):
        return
    store: Store = request.app.state.store
    try:
        retry_after = await store.rates.ahit(rate_key(request), limit)
    except ResponseError as exc:
        if not write_refused(exc):
            raise
        RATE_LIMIT_FAILED_OPEN.inc()
        log.warning("rate limit not counted (Redis refuses writes: %s); request let through", exc)
        return
    if retry_after is not None:
        raise HTTPException(
            status_code=429,
            detail=f"rate limit: at most {limit} requests per minute per tenant (rate_limit_per_minute)",
            headers={"Retry-After": str(retry_after), "RateLimit-Limit": str(limit), "RateLimit-Remaining": "0"},
            extra={"field": "Authorization"},
        )
