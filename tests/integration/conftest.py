"""Integration fixtures: a private redis-server per session, a clean db per test, the API through Litestar's test
client, and real RQ workers in burst mode on a FAKE engine (the one real-engine test is marked `engine`)."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from bench.fake_worker import FakeWorkerEngine
from juiz.runtime.settings import Settings
from juiz.store import ratelimit
from service.app import create_app
from tests.integration.fake_workers import Workers
from tests.integration.helpers import REDIS_SERVER, AofRedis, make_settings, redis_server
from workers import jobs
from workers.scheduler import enqueue_due_retries
from workers.worker import build_worker


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private redis-server on a free port for the whole session: no persistence, never the shared one."""
    if not Path(REDIS_SERVER).exists():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[AofRedis]:
    """A private redis-server with its append-only file on, which a test stops and starts again."""
    if not Path(REDIS_SERVER).exists():
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    server = AofRedis(tmp_path / "redis")
    server.workdir.mkdir()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def workers() -> Iterator[Workers]:
    """FAKE-engine workers as subprocesses, stopped after the test."""
    pool = Workers()
    yield pool
    pool.stop_all()


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def one_rate_window(monkeypatch: pytest.MonkeyPatch) -> float:
    """Hold the rate limiter's clock mid-minute, so that a test's requests can't straddle two windows."""
    held = (time.time() // ratelimit.WINDOW_S) * ratelimit.WINDOW_S + ratelimit.WINDOW_S / 2
    monkeypatch.setattr(ratelimit, "now", lambda: held)
    return held


@pytest.fixture
def settings(redis_url: str) -> Settings:
    return make_settings(redis_url)


@pytest.fixture
def engine(redis: Redis) -> FakeWorkerEngine:
    """The FAKE engine, counting completed gradings per `[item-N]` in Redis."""
    return FakeWorkerEngine(redis)


@pytest.fixture
def make_client(redis: Redis) -> Iterator[Callable[[Settings], TestClient[Litestar]]]:
    clients: list[TestClient[Litestar]] = []

    def make(settings: Settings) -> TestClient[Litestar]:
        client = TestClient(create_app(settings, redis))
        client.__enter__()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.__exit__(None, None, None)


@pytest.fixture
def client(make_client: Callable[[Settings], TestClient[Litestar]], settings: Settings) -> TestClient[Litestar]:
    return make_client(settings)


WorkerRunner = Callable[..., bool]


@pytest.fixture
def run_worker(redis: Redis, engine: FakeWorkerEngine) -> Iterator[WorkerRunner]:
    """Run a real RQ worker (JuizWorker) in this process, in burst mode, as rq's own tests do."""
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))

    def run(settings: Settings, *, max_jobs: int | None = None, worker_engine: Any = None) -> bool:
        worker = build_worker(settings, redis, worker_engine or engine)
        try:
            enqueue_due_retries(settings, redis)  # as workers.worker.run's burst mode does; never RQ's forked scheduler
            return worker.work(burst=True, max_jobs=max_jobs, logging_level="WARNING")
        finally:
            jobs.unbind()
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])

    yield run
