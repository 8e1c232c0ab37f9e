"""The result cache: a stored judgement reused for an identical triple, prompt, sampling and engine.

Each batch keeps the digests its items read or wrote (`batch:{id}:cache`), so purging a batch erases its entries."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from redis import Redis

from juiz.store.keys import batch_key, cache_key, text


class ResultCache:
    def __init__(self, redis: Redis, ttl_s: int) -> None:
        self.redis = redis
        self.ttl_s = ttl_s

    def get(self, digests: Sequence[str]) -> list[dict[str, Any] | None]:
        if not digests:
            return []
        values = self.redis.mget([cache_key(d) for d in digests])
        return [None if v is None else json.loads(v) for v in values]

    def put(self, entries: dict[str, dict[str, Any]]) -> None:
        if not entries:
            return
        with self.redis.pipeline(transaction=False) as pipe:
            for digest, value in entries.items():
                pipe.set(cache_key(digest), json.dumps(value, ensure_ascii=False), ex=self.ttl_s)
            pipe.execute()

    def remember(self, digests_by_batch: Mapping[str, Sequence[str]]) -> None:
        """Note which entries each batch's items read or wrote (kept as long as an entry: the cache's TTL)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for batch_id, digests in digests_by_batch.items():
                if digests:
                    pipe.sadd(batch_key(batch_id, "cache"), *digests)
                    pipe.expire(batch_key(batch_id, "cache"), self.ttl_s)
            pipe.execute()

    def forget(self, batch_id: str) -> int:
        """Erase the entries the batch's items read or wrote; returns how many there were."""
        digests = [text(d) for d in self.redis.smembers(batch_key(batch_id, "cache"))]
        with self.redis.pipeline(transaction=False) as pipe:
            for digest in digests:  # one command each: the entries lie in many slots
                pipe.delete(cache_key(digest))
            pipe.delete(batch_key(batch_id, "cache"))
            pipe.execute()
        return len(digests)
