"""The API's hot paths on its event loop (asyncio client): a batch's hash, raw result pages, uncertain-first pages,
waiting for a batch's progress, the cached agreement reports. No thread hop and no Judgement parsed again: what
the store wrote is handed back as it is (raw bytes), for the API to frame.

Tenant checks stay the caller's: each read returns the batch's owner with the data, in the same round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis as AsyncRedis

from juiz.store.batches import TERMINAL, BatchRecord, batch_from_hash
from juiz.store.keys import batch_key, text
from juiz.store.results import UNCERTAIN_PAGE, uncertain_page_keys

TERMINAL_STATUSES = frozenset(status.value.encode() for status in TERMINAL)


@dataclass(frozen=True)
class RawPage:
    """Stored entries (b"index\\njudgement JSON") with the batch's owner (None: no such batch) and state."""

    owner: str | None
    terminal: bool
    count: int  # results stored so far
    entries: list[bytes]
    ranked: int = 0  # uncertain-first pages: index entries read (an entry may be missing while it is written)


class AsyncReads:
    def __init__(self, redis: AsyncRedis) -> None:
        self.redis = redis
        self._uncertain_page = redis.register_script(UNCERTAIN_PAGE)  # no round trip: called by its SHA

    async def batch(self, batch_id: str) -> BatchRecord | None:
        """One HGETALL: the polling path."""
        return batch_from_hash(await self.redis.hgetall(batch_key(batch_id)))

    async def results(self, batch_id: str, offset: int, limit: int) -> RawPage:
        """Entries in completion order from `offset`, in one round trip."""
        results = batch_key(batch_id, "results")
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hmget(batch_key(batch_id), "tenant", "status")
            pipe.lrange(results, offset, offset + limit - 1)
            pipe.llen(results)
            (owner, status), entries, count = await pipe.execute()
        return RawPage(None if owner is None else text(owner), status in TERMINAL_STATUSES, int(count), entries)

    async def uncertain(self, batch_id: str, first: int, last: int) -> RawPage:
        """Ranks first..last of the most-uncertain-first order (juiz.store.results.UNCERTAIN_PAGE), one script call."""
        owner, status, count, ranked, entries = await self._uncertain_page(
            keys=uncertain_page_keys(batch_id), args=[first, last]
        )
        return RawPage(
            None if owner is None else text(owner), status in TERMINAL_STATUSES, int(count), entries, int(ranked)
        )

    async def wait_for_progress(self, batch_id: str, cursor: str, timeout_s: float) -> str:
        """Block until the batch has an event newer than `cursor`, or `timeout_s`; returns the newest id seen."""
        key = batch_key(batch_id, "events")
        reply: Any = await self.redis.xread({key: cursor}, count=100, block=max(1, int(timeout_s * 1000)))
        return text(reply[0][1][-1][0]) if reply else cursor

    async def labels_version(self, batch_id: str) -> int:
        return int(await self.redis.hget(batch_key(batch_id), "labels_version") or 0)

    async def cached(self, key: str) -> bytes | None:
        """A report the API cached under one of a batch's keys (its agreement reports)."""
        value = await self.redis.get(key)
        return value.encode() if isinstance(value, str) else value

    async def shared_secret(self, key: str, make: str) -> str:
        """A secret every API replica shares: `make` stored under `key` unless one is there already (SET NX), then
        read."""
        while (value := await self.redis.get(key)) is None:
            await self.redis.set(key, make, nx=True)
        return text(value)

    async def cache(self, key: str, value: str, ttl_s: int | None) -> None:
        await self.redis.set(key, value, ex=ttl_s or None)
