"""The result cache: a stored judgement reused for an identical triple, prompt, model and sampling."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from redis import Redis

from juiz.store.keys import cache_key


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
