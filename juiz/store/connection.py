"""The Redis clients the API and the workers hold: a connection a Redis restart left stale fails once and is retried
on a fresh one (with a short backoff while Redis is still coming back), and idle connections are checked before use,
instead of the first request after a restart answering 503 or a worker's step failing for nothing."""

from __future__ import annotations

from typing import Any, ClassVar

from redis import Redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.connection import DefaultParser as AsyncDefaultParser
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import DefaultParser
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from juiz.runtime.retry import StoreMisconfigured
from juiz.runtime.settings import Settings

RETRIED = (RedisConnectionError, RedisTimeoutError, ConnectionResetError)


# redis-py maps OOM and READONLY replies to classes of their own, not MISCONF: juiz's clients do, so that every
# write refusal is one `except juiz.runtime.retry.REDIS_REFUSED`.
REFUSALS = {"MISCONF": StoreMisconfigured}


class Parser(DefaultParser):  # type: ignore[valid-type,misc]  # redis-py types DefaultParser as a Union
    EXCEPTION_CLASSES: ClassVar[dict[str, Any]] = {**DefaultParser.EXCEPTION_CLASSES, **REFUSALS}


class AsyncParser(AsyncDefaultParser):  # type: ignore[valid-type,misc]
    EXCEPTION_CLASSES: ClassVar[dict[str, Any]] = {**AsyncDefaultParser.EXCEPTION_CLASSES, **REFUSALS}


def _retrying(settings: Settings) -> dict[str, Any]:
    return {"health_check_interval": settings.redis_health_check_s, "retry_on_error": list(RETRIED)}


def redis_client(settings: Settings) -> Redis:
    """A client retrying a dead connection."""
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0)
    return Redis.from_url(settings.redis_url, retry=Retry(backoff, 3), parser_class=Parser, **_retrying(settings))


def async_redis_client(settings: Settings) -> AsyncRedis:
    """The asyncio client (the API's hot read paths: result pages, polls, rate limits), retrying a dead connection."""
    backoff = ExponentialWithJitterBackoff(base=0.05, cap=1.0)
    return AsyncRedis.from_url(
        settings.redis_url, retry=AsyncRetry(backoff, 3), parser_class=AsyncParser, **_retrying(settings)
    )
