"""Per-tenant rate limits on /v1: `rate_limit_per_minute` requests per tenant per minute, counted in Redis so every
API replica shares the count; over it, 429 with `Retry-After`.

Litestar's RateLimitMiddleware keys by client address and keeps a request log it reads and rewrites under one
process-wide lock (two round trips per request, and not atomic across replicas); a fixed one-minute window counted
with INCR is one atomic round trip, which matters on the polling path's p99.
"""

from __future__ import annotations

import time
from typing import Any

from litestar import Request
from litestar.exceptions import HTTPException
from redis.asyncio import Redis as AsyncRedis

from juiz.store import PREFIX
from service.auth import tenant_for
from service.views import API_PREFIX

WINDOW_S = 60


def rate_key(request: Request[Any, Any, Any]) -> str:
    """Who is counted: the caller's tenant; without a known key (open API, wrong key) the client address, so that
    guessing keys is limited too."""
    tenants_by_key: dict[str, str] = request.app.state.tenants_by_key
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if tenants_by_key and scheme.lower() == "bearer" and token.strip():
        tenant = tenant_for(token.strip(), tenants_by_key)
        if tenant is not None:
            return f"tenant:{tenant}"
    return f"client:{request.client.host if request.client else 'unknown'}"


async def enforce_rate_limit(request: Request[Any, Any, Any]) -> None:
    """Litestar before_request hook (app-wide; only /v1 routes count): 429 when the caller's window is used up."""
    limit: int = request.app.state.settings.rate_limit_per_minute
    if limit <= 0 or not request.url.path.startswith(API_PREFIX):
        return
    redis: AsyncRedis = request.app.state.async_redis
    now = time.time()
    window = int(now // WINDOW_S)
    key = f"{PREFIX}:ratelimit:{rate_key(request)}:{window}"
    async with redis.pipeline(transaction=False) as pipe:  # one round trip; INCR is atomic on its own
        pipe.incr(key)
        pipe.expire(key, WINDOW_S * 2)  # the window's key outlives its minute, then goes
        count, _ = await pipe.execute()
    if int(count) > limit:
        retry_after = max(1, int((window + 1) * WINDOW_S - now) + 1)
        raise HTTPException(
            status_code=429,
            detail=f"rate limit: at most {limit} requests per minute per tenant (rate_limit_per_minute)",
            headers={"Retry-After": str(retry_after), "RateLimit-Limit": str(limit), "RateLimit-Remaining": "0"},
            extra={"field": "Authorization"},
        )
