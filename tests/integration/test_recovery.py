"""Faults: a worker SIGKILLed mid-chunk, transient engine faults (retried), permanent ones (items failed), leases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from juiz.engine import Completion, Conversation, GenerationRequest
from juiz.errors import EngineError, TransientEngineError
from juiz.settings import ENV_PREFIX, Settings
from juiz.store import ChunkRef, Store
from tests.integration.fake_worker import GRADED_KEY, STARTED_KEY, CountingFakeEngine
from tests.integration.helpers import make_settings, triples

REPO = Path(__file__).resolve().parents[2]
MakeClient = Callable[[Settings], TestClient[Litestar]]


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def settings_env(settings: Settings) -> dict[str, str]:
    return {ENV_PREFIX + name.upper(): str(value) for name, value in settings.model_dump().items()}


def graded_counts(redis: Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in redis.hgetall(GRADED_KEY).items()}


def test_worker_killed_mid_chunk_loses_nothing_and_grades_nothing_twice(
    make_client: MakeClient, redis_url: str, redis: Redis, run_worker: Any
) -> None:
    # Chunks of 2, calls of up to 4 items; a job may run 4 s, and is taken as abandoned 1 s after that.
    settings = make_settings(
        redis_url, chunk_size=2, coalesce_max_items=4, job_timeout_s=4, lease_s=4, heartbeat_grace_s=1
    )
    client = make_client(settings)
    batch = client.post("/v1/batches", json={"items": triples(8)}).json()

    env = {**os.environ, **settings_env(settings), "JUIZ_FAKE_ENGINE_DELAY_S": "1.5"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.fake_worker"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The first call (chunks 0 and 1) finishes and is stored; kill the worker during the second call.
        wait_until(lambda: int(redis.get(STARTED_KEY) or 0) >= 2, 30, "the worker's second engine call")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert graded_counts(redis) == {str(i): 1 for i in range(4)}
    assert client.get(batch["links"]["self"]).json()["status"] == "running"

    started = StartedJobRegistry(settings.queue, connection=redis, serializer=JSONSerializer)
    assert started.get_job_count(cleanup=False) == 1  # the killed job, still marked as running
    wait_until(lambda: bool(started.get_expired_job_ids()), 15, "RQ to see the killed job as abandoned")

    run_worker(settings)  # a fresh worker: RQ's maintenance requeues the abandoned job, the rest is graded

    assert graded_counts(redis) == {str(i): 1 for i in range(8)}  # every item graded exactly once
    done = client.get(batch["links"]["self"]).json()
    assert done["status"] == "done" and done["counts"]["ok"] == 8
    ids = [r["id"] for r in client.get(batch["links"]["results"], params={"limit": 100}).json()["items"]]
    assert sorted(ids) == sorted(f"t{i}" for i in range(8))
    assert started.get_job_count(cleanup=False) == 0


def test_a_chunk_leased_by_another_worker_is_requeued_until_it_can_be_graded(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    batch = client.post("/v1/batches", json={"items": triples(4)}).json()
    store = Store(redis, settings)
    redis.set(store.lease_key(ChunkRef(batch["id"], 0)), "a-worker-that-died", px=400)

    run_worker(settings)

    assert graded_counts(redis) == {str(i): 1 for i in range(4)}
    assert client.get(batch["links"]["self"]).json()["status"] == "done"
    assert redis.scard(store.batch_key(batch["id"], "jobs")) > 1  # the job put itself back while the lease held


class FlakyEngine(CountingFakeEngine):
    """FAKE engine failing its first `failures` calls with the given error."""

    def __init__(self, redis: Redis, error: Exception, failures: int) -> None:
        super().__init__(redis)
        self.error = error
        self.failures = failures
        self.attempts = 0

    def generate(self, conversations: Sequence[Conversation], request: GenerationRequest) -> list[Completion]:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error
        return super().generate(conversations, request)


def test_a_transient_fault_is_retried(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    batch = client.post("/v1/batches", json={"items": triples(3)}).json()
    engine = FlakyEngine(redis, TransientEngineError("connection refused"), failures=2)
    run_worker(settings, worker_engine=engine)
    assert engine.attempts == 3
    assert client.get(batch["links"]["self"]).json()["counts"]["ok"] == 3


def test_transient_faults_past_the_retries_fail_the_items_with_the_reason(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    batch = client.post("/v1/batches", json={"items": triples(3)}).json()
    engine = FlakyEngine(redis, TransientEngineError("connection refused"), failures=100)
    run_worker(settings, worker_engine=engine)
    assert engine.attempts == 4  # the first run and three retries
    view = client.get(batch["links"]["self"]).json()
    assert view["status"] == "failed" and view["counts"]["failed"] == 3
    results = client.get(batch["links"]["results"]).json()["items"]
    assert {r["status"] for r in results} == {"failed"}
    assert all("TransientEngineError: connection refused" in r["error"] for r in results)
    assert all(r["provenance"]["model"] == "fake-engine" for r in results)


def test_a_permanent_fault_fails_the_items_without_retrying(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    batch = client.post("/v1/batches", json={"items": triples(2)}).json()
    engine = FlakyEngine(redis, EngineError("input too long"), failures=100)
    run_worker(settings, worker_engine=engine)
    assert engine.attempts == 3  # one batched call, then the judge isolates each item once: no RQ retry
    results = client.get(batch["links"]["results"]).json()["items"]
    assert {r["status"] for r in results} == {"failed"}
    assert all("input too long" in r["error"] for r in results)
    assert client.get(batch["links"]["self"]).json()["status"] == "failed"
