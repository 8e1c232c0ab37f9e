"""Helpers shared by the integration tests."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from rq import Queue

from juiz.clients import http as client_module
from juiz.runtime.settings import Settings
from tests.integration.fake_workers import wait_until

# /metrics and /ready answer loopback clients or this key; Litestar's test client is neither ("testclient").
METRICS_KEY = "test-metrics-key"
METRICS_HEADERS = {"Authorization": f"Bearer {METRICS_KEY}"}
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pings(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except RedisError:
        return False


@contextmanager
def redis_server(workdir: Path, *args: str, what: str = "redis-server") -> Iterator[str]:
    """A private redis-server on a free port, nothing persisted, `args` added to its command line: its URL once it
    answers, stopped on the way out."""
    port = free_port()
    command = [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    command += ["--dir", str(workdir), *args]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    client = Redis.from_url(url)
    try:
        wait_until(lambda: pings(client), f"{what} to start")
        yield url
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)


class AofRedis:
    """A private redis-server with the append-only file on (fsync always), restartable on the same port and dir."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"]
        self.process = subprocess.Popen([REDIS_SERVER, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        client = Redis.from_url(self.url)
        wait_until(lambda: pings(client), "redis-server to start")
        client.close()

    def shutdown(self) -> None:
        """SHUTDOWN: the AOF is flushed and the server exits, as in `docker restart`."""
        client = Redis.from_url(self.url)
        with contextlib.suppress(RedisConnectionError):  # the server closes the connection as it goes
            client.shutdown()
        client.close()
        assert self.process is not None
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


def cli_against(client: TestClient[Litestar], monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI opens its own httpx.Client on the URL: hand it the app's test client."""
    monkeypatch.setattr(client_module.httpx, "Client", lambda **_: client)
    monkeypatch.setattr(client_module.JuizClient, "close", lambda self: None)  # the fixture closes the test client


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
