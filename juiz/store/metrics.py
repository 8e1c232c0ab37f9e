"""Counters and histograms that /metrics reads at scrape time, summed over every process that writes them."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

from redis import Redis

from juiz.store.keys import METRICS_KEY, histogram_key, rate_key, text

ENGINE_CALL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ITEM_BUCKETS = (0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
RATE_WINDOW_S = 60


class Metrics:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    def count(self, name: str, by: int = 1) -> None:
        self.redis.hincrby(METRICS_KEY, name, by)

    def record_engine_call(self, seconds: float, items: int) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            _observe(pipe, "engine_call_seconds", ENGINE_CALL_BUCKETS, seconds, 1)
            pipe.hincrby(METRICS_KEY, "engine_calls", 1)
            pipe.hincrby(METRICS_KEY, "engine_items", items)
            pipe.execute()

    def record_cache_hits(self, hits: int) -> None:
        if hits:
            self.count("cache_hits", hits)

    def record_items(self, seconds: float, by_status: Mapping[str, int], now: float) -> None:
        """Items just stored: their count by status, their time since the batch was created, the per-second rate."""
        count = sum(by_status.values())
        key = rate_key(int(now))
        with self.redis.pipeline(transaction=False) as pipe:
            for status, n in by_status.items():
                pipe.hincrby(METRICS_KEY, f"items_{status}", n)
            _observe(pipe, "item_seconds", ITEM_BUCKETS, seconds, count)
            pipe.incrby(key, count)
            pipe.expire(key, RATE_WINDOW_S * 2)
            pipe.execute()

    def counters(self) -> dict[str, int]:
        return {text(k): int(v) for k, v in self.redis.hgetall(METRICS_KEY).items()}

    def histogram(self, name: str, buckets: Sequence[float]) -> tuple[list[tuple[str, int]], float, int]:
        """Cumulative (le, count) pairs ending with +Inf, the sum and the count, as Prometheus wants them."""
        raw = {text(k): v for k, v in self.redis.hgetall(histogram_key(name)).items()}
        cumulative, running = [], 0
        for bound in (*buckets, math.inf):
            label = "+Inf" if bound == math.inf else repr(float(bound))
            running += int(raw.get(label, 0))
            cumulative.append((label, running))
        return cumulative, float(raw.get("sum", 0)), int(raw.get("count", 0))

    def judgements_per_second(self) -> float:
        """Items stored per second over the last minute, all workers together."""
        now = int(time.time())
        values = self.redis.mget([rate_key(second) for second in range(now - RATE_WINDOW_S + 1, now + 1)])
        return sum(int(v) for v in values if v is not None) / RATE_WINDOW_S


def _observe(pipe: Any, name: str, buckets: Sequence[float], value: float, count: int) -> None:
    key = histogram_key(name)
    bound = next((b for b in buckets if value <= b), math.inf)
    pipe.hincrby(key, "+Inf" if bound == math.inf else repr(float(bound)), count)
    pipe.hincrbyfloat(key, "sum", value * count)
    pipe.hincrby(key, "count", count)
