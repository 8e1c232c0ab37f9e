"""Per-caller request counts in fixed one-minute windows, shared by every API replica: one atomic INCR per request.

`RateCounts.hit(who)` (sync, the web page's sign-in) and `RateCounts.ahit(who)` (the API's event loop) count a
request and answer the seconds to wait when the caller is over `limit`, else None. The caller decides what to do
when Redis refuses the write (the API fails open and counts it: a full Redis must not refuse reads).
"""

from __future__ import annotations

import time

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from juiz.store.keys import PREFIX

WINDOW_S = 60


def now() -> float:
    """The limiter's clock, a module function so that a test can hold it inside one window."""
    return time.time()


def _key(who: str, window: int) -> str:
    return f"{PREFIX}:ratelimit:{who}:{window}"


def _retry_after(count: int, limit: int, window: int, at: float) -> int | None:
    if count <= limit:
        return None
    return max(1, int((window + 1) * WINDOW_S - at) + 1)


class RateCounts:
    """`who` is "tenant:<name>" or "client:<address>"; the window's key outlives its minute, then goes."""

    def __init__(self, redis: Redis, async_redis: AsyncRedis | None = None) -> None:
        self.redis = redis
        self.async_redis = async_redis

    def hit(self, who: str, limit: int) -> int | None:
        at = now()
        window = int(at // WINDOW_S)
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.incr(_key(who, window))
            pipe.expire(_key(who, window), WINDOW_S * 2)
            count, _ = pipe.execute()
        return _retry_after(int(count), limit, window, at)

    async def ahit(self, who: str, limit: int) -> int | None:
        if self.async_redis is None:
            raise RuntimeError("RateCounts.ahit needs the asyncio client")
        at = now()
        window = int(at // WINDOW_S)
        async with self.async_redis.pipeline(transaction=False) as pipe:  # one round trip; INCR is atomic on its own
            pipe.incr(_key(who, window))
            pipe.expire(_key(who, window), WINDOW_S * 2)
            count, _ = await pipe.execute()
        return _retry_after(int(count), limit, window, at)
