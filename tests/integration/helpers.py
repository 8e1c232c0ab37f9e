"""Helpers shared by the integration tests."""

from __future__ import annotations

import socket
from typing import Any

from redis import Redis
from rq import Queue

from juiz.runtime.settings import Settings

# /metrics and /ready answer loopback clients or this key; Litestar's test client is neither ("testclient").
METRICS_KEY = "test-metrics-key"
METRICS_HEADERS = {"Authorization": f"Bearer {METRICS_KEY}"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_settings(redis_url: str, **overrides: Any) -> Settings:
    """Small chunks, short timeouts and no retry backoff, so tests stay quick."""
    values: dict[str, Any] = {
        "redis_url": redis_url,
        "model": "fake-engine",
        "chunk_size": 4,
        "coalesce_max_items": 4,
        "job_timeout_s": 20,
        "heartbeat_interval_s": 0.5,
        "heartbeat_ttl_s": 5,
        "redis_retry_s": 30,
        "retry_backoff_s": "0,0,0",
        "maintenance_interval_s": 1,
        "grade_timeout_s": 5,
        "log_level": "WARNING",
        "rate_limit_per_minute": 0,  # no juiz:ratelimit:* keys; tests of the limit set their own
        "metrics_key": METRICS_KEY,
    }
    values.update(overrides)
    return Settings(**values)


def triples(n: int, *, start: int = 0, label: str | None = "C", prefix: str = "t") -> list[dict[str, Any]]:
    """n distinct triples; each question carries an `[item-N]` marker the fake engine counts and scores by."""
    items = []
    for i in range(start, start + n):
        item: dict[str, Any] = {
            "id": f"{prefix}{i}",
            "question": f"What does the lecture say about topic {i}? [item-{i}]",
            "answer": f"It explains topic {i} in detail.",
            "context": f"Transcript about topic {i}.",
        }
        if label is not None:
            item["manual_label"] = label
        items.append(item)
    return items


def juiz_keys(redis: Redis) -> list[str]:
    return sorted(k.decode() if isinstance(k, bytes) else k for k in redis.keys("juiz:*"))


def queued_jobs(redis: Redis, settings: Settings) -> int:
    """Jobs waiting in the service's RQ queues, read through RQ's public API (its key layout is RQ's own)."""
    return sum(Queue(name, connection=redis).count for name in settings.queues)
