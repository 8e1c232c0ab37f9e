"""Integration fixtures: a private redis-server per session, a clean db per test, the API through Litestar's test
client, and real RQ workers in burst mode on a FAKE engine (the one real-engine test is marked `engine`)."""

from __future__ import annotations

import shutil
import signal
import subprocess
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
from service.app import create_app
from tests.integration.helpers import free_port, make_settings
from workers import jobs
from workers.scheduler import enqueue_due_retries
from workers.worker import build_worker

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


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
    port = free_port()
    workdir = tmp_path_factory.mktemp("redis")
    process = subprocess.Popen(
        [
            REDIS_SERVER,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = Redis.from_url(url)
    try:
        for _ in range(100):
            try:
                client.ping()
                break
            except Exception:
                time.sleep(0.05)
        else:
            raise RuntimeError("private redis-server did not start")
        yield url
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def redis(redis_url: str) -> Iterator[Redis]:
    client = Redis.from_url(redis_url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


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
