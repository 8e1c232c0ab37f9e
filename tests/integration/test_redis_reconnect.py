"""After a Redis restart the API's pooled connections are stale (before the fix, 9-11 of 60 requests were 503 5 s
after recovery). redis-py's Retry and health checks reconnect them: with Redis back, every request succeeds."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from pathlib import Path

import pytest
from redis import Redis

from tests.integration.helpers import REDIS_SERVER, free_port, make_settings, triples


class PrivateRedis:
    """A redis-server of this test's own, stopped and started again on the same port."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            cwd=self.workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:  # waiting for the server to accept connections: there is no event to wait on
            try:
                client.ping()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
        client.close()

    def stop(self) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=10)


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.process and server.process.poll() is None:
        server.stop()


def test_requests_succeed_once_redis_is_back(private_redis: PrivateRedis) -> None:
    from litestar.testing import TestClient

    from service.app import create_app

    # The app opens its own connections (none passed in), as `juiz serve` does; the rate limit's async path counts.
    settings = make_settings(private_redis.url, rate_limit_per_minute=100_000)
    with TestClient(create_app(settings)) as client:

        def round_trip(i: int) -> list[int]:
            created = client.post("/v1/batches", json={"items": triples(1, start=i)})
            polled = client.get(f"/v1/batches/{created.json().get('id', '0' * 32)}")
            return [created.status_code, polled.status_code]

        with ThreadPoolExecutor(8) as pool:  # several pooled connections in use, then all of them stale
            assert set(chain.from_iterable(pool.map(round_trip, range(16)))) == {200, 202}
        private_redis.stop()
        down = client.get("/v1/batches/" + "0" * 32)
        assert down.status_code == 503 and down.headers["retry-after"]
        private_redis.start()
        with ThreadPoolExecutor(8) as pool:
            statuses = list(chain.from_iterable(pool.map(round_trip, range(100, 160))))
    assert statuses.count(503) == 0, statuses
    assert set(statuses) == {200, 202}
