"""The Redis clients the API and the workers hold: a connection a Redis restart left stale fails once and is retried
on a fresh one (with a short backoff while Redis is still coming back), and idle connections are checked before use,
instead of the first request after a restart answering 503 or a worker's step failing for nothing."""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from juiz.runtime.settings import Settings

RETRIED = (RedisConnectionError, RedisTimeoutError, ConnectionResetError)


def _retrying(settings: Settings) -> dict[str, Any]:
    return {"health_check_interval": settings.redis_health_check_s, "retry_on_error": list(RETRIED)}


def redis_client(settings: Settings) -> Redis:
    """A client retrying a dead connection."""
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0)
    return Redis.from_url(settings.redis_url, retry=Retry(backoff, 3), **_retrying(settings))


def async_redis_client(settings: Settings) -> AsyncRedis:
    """The asyncio client (the API's hot read paths: result pages, polls, rate limits), retrying a dead connection."""
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0)
    return AsyncRedis.from_url(settings.redis_url, retry=AsyncRetry(backoff, 3), **_retrying(settings))
