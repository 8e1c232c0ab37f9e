"""Redis full (maxmemory with noeviction): a private redis-server at 2 MB. The API answers writes with 507 and
Retry-After, reads as usual (the rate limit fails open, counted), /ready and /metrics say the store is not writable;
a worker mid-batch waits (it never exits) and finishes the batch, every item once, when memory is raised."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis
from redis.exceptions import OutOfMemoryError

from bench.fake_worker import FakeWorkerEngine
from juiz.judging.judge import Judge
from juiz.runtime.settings import Settings
from juiz.store import Store
from service.app import create_app
from tests.integration.helpers import METRICS_HEADERS, REDIS_SERVER, make_settings, redis_server, triples
from tests.integration.test_recovery import wait_until
from workers import jobs
from workers import worker as worker_module

MAXMEMORY = "2mb"
EDGE = 128 * 1024  # bytes below used memory that fill() sets maxmemory to: more than the clients' buffers move


@pytest.fixture
def small_redis(tmp_path: Path) -> Iterator[str]:
    """A private redis-server that refuses writes past 2 MB (noeviction: what a queue must be run with).

    Without per-command latency tracking: Redis 7 keeps a latency histogram (some 20 KB) for each command name it has
    run, counted in used_memory, and the API, RQ and the worker run about 45 of them: about 1 MB that has nothing to do
    with the data, which left no room below 2 MB for a first chunk's results (some 14 KB an item with its cache entry on
    the default judge)."""
    if not Path(REDIS_SERVER).exists():
        pytest.skip("redis-server is not installed")
    limits = ["--maxmemory", MAXMEMORY, "--maxmemory-policy", "noeviction", "--latency-tracking", "no"]
    with redis_server(tmp_path, *limits) as url:
        yield url


@pytest.fixture
def replica_redis(small_redis: str, tmp_path: Path) -> Iterator[str]:
    """A read-only replica of `small_redis`: every write is refused with READONLY."""
    primary_port = small_redis.rsplit(":", 1)[1].split("/")[0]
    replica = ["--replicaof", "127.0.0.1", primary_port, "--replica-read-only", "yes"]
    with redis_server(tmp_path, *replica, what="the replica") as url:
        yield url


def ballast(client: Redis) -> None:
    """Ballast until Redis refuses a write."""
    while True:
        try:
            client.set(f"ballast:{time.monotonic_ns()}", b"x" * 8192)
        except OutOfMemoryError:
            return


def fill(client: Redis) -> None:
    """Ballast until Redis refuses a write, then maxmemory a little below what it uses: full for a small write too.

    Ballast alone leaves it at the edge: Redis counts its clients' buffers, and shrinks idle ones on its own timer,
    so a moment later a small write (the /ready probe's) would get through."""
    ballast(client)
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", str(used - EDGE))


def raise_memory(client: Redis) -> None:
    client.config_set("maxmemory", "0")


def test_api_answers_507_with_retry_after_and_keeps_reading(small_redis: str) -> None:
    redis = Redis.from_url(small_redis)
    settings = make_settings(small_redis, rate_limit_per_minute=1000)
    with TestClient(create_app(settings, redis)) as client:
        made = client.post("/v1/batches", json={"items": triples(3)})
        assert made.status_code == 202, made.text
        batch_id = made.json()["id"]
        fill(redis)

        refused = client.post("/v1/batches", json={"items": triples(3, start=10)})
        assert refused.status_code == 507, refused.text
        assert int(refused.headers["Retry-After"]) > 0
        assert "full" in refused.json()["detail"]

        # Reads still work: the rate limit's INCR is refused, and the limit fails open (counted in /metrics).
        read = client.get(f"/v1/batches/{batch_id}")
        assert read.status_code == 200, read.text
        ready = client.get("/ready", headers=METRICS_HEADERS)
        assert ready.status_code == 503 and ready.json()["writable"] is False
        assert "refuses writes" in ready.json()["reason"]
        metrics = client.get("/metrics", headers=METRICS_HEADERS).text
        assert "juiz_store_writable 0.0" in metrics
        assert "juiz_rate_limit_failed_open_total" in metrics
        assert 'juiz_store_refused_writes_total{reason="full"}' in metrics

        # The page's first request creates the shared CSRF secret (a SET): refused, answered, not a 500.
        page = client.get("/ui/signin")
        assert page.status_code in (200, 503, 507), page.text
        assert page.status_code == 200 or "Retry-After" in page.headers

        raise_memory(redis)
        again = client.post("/v1/batches", json={"items": triples(3, start=10)})
        assert again.status_code == 202, again.text
        assert "juiz_store_writable 1.0" in client.get("/metrics", headers=METRICS_HEADERS).text
    redis.close()


def test_worker_waits_out_a_full_redis_and_finishes_the_batch(small_redis: str) -> None:
    redis = Redis.from_url(small_redis)
    settings: Settings = make_settings(small_redis, redis_retry_s=1)  # a job gives up early: the worker must not
    engine = FakeWorkerEngine(call_s=0.2)  # counts nothing in Redis: the engine's own writes are not under test
    store = Store(redis, settings)
    seen: dict[str, Any] = {}
    with TestClient(create_app(settings, redis)) as client:
        made = client.post("/v1/batches", json={"items": triples(24)})
        assert made.status_code == 202, made.text
        batch_id = made.json()["id"]

        def full_for_a_while() -> None:
            try:
                wait_until(lambda: store.result_count(batch_id) >= 4, "a first chunk")
                fill(redis)
                seen["stored_when_full"] = store.result_count(batch_id)
                until = time.monotonic() + 4  # longer than a job's retries (1 s): the worker itself must wait
                while time.monotonic() < until:  # kept full: what RQ or the store frees is taken again at once
                    ballast(redis)
                    time.sleep(0.01)
                seen["stored_before_raise"] = store.result_count(batch_id)
                # Reported while full: the store not writable, and the worker still there (waiting, not gone).
                ready = client.get("/ready", headers=METRICS_HEADERS)
                seen["ready_status"], seen["ready_writable"] = ready.status_code, ready.json()["writable"]
                seen["ready_workers"] = len(ready.json()["workers"])
                seen["metrics_not_writable"] = (
                    "juiz_store_writable 0.0" in client.get("/metrics", headers=METRICS_HEADERS).text
                )
                raise_memory(redis)
                wait_until(lambda: store.result_count(batch_id) >= 24, "the batch to finish", timeout_s=90)
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # the worker's warm shutdown, as `docker stop` asks it

        handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
        filler = threading.Thread(target=full_for_a_while, daemon=True)
        filler.start()
        try:
            # Not burst: a job lost between queue and registry while Redis refused writes is requeued by RQ's
            # maintenance or the sweeper, as in production. RQ's worker installs signal handlers: main thread.
            worker_module.run(settings, engine)
        finally:
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
        filler.join(timeout=10)
        assert seen["stored_before_raise"] < 24, seen
        assert seen["ready_status"] == 503 and seen["ready_writable"] is False, seen
        assert seen["ready_workers"] == 1 and seen["metrics_not_writable"], seen
        batch = client.get(f"/v1/batches/{batch_id}").json()
        assert batch["status"] == "done", batch
        results = client.get(f"/v1/batches/{batch_id}/results", params={"limit": 100}).json()
        ids = [r["id"] for r in results["items"]]
        assert sorted(ids) == sorted(f"t{i}" for i in range(24)), ids
    redis.close()


def test_a_read_only_replica_is_a_503_with_retry_after(replica_redis: str) -> None:
    redis = Redis.from_url(replica_redis)
    settings = make_settings(replica_redis)
    with TestClient(create_app(settings, redis)) as client:
        refused = client.post("/v1/batches", json={"items": triples(1)})
        assert refused.status_code == 503, refused.text
        assert int(refused.headers["Retry-After"]) > 0 and "refuses writes" in refused.json()["detail"]
        ready = client.get("/ready", headers=METRICS_HEADERS)
        assert ready.status_code == 503 and ready.json()["writable"] is False
    redis.close()


def test_a_retry_of_a_finished_batchs_job_grades_nothing(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    """What RQ's retry runs after a worker resumed (SIGSTOP, then SIGCONT) and failed to record a job whose batch
    others finished meanwhile: the job finds the batch over and stops, nothing graded or stored again."""
    made = client.post("/v1/batches", json={"items": triples(4)}).json()
    run_worker(settings)
    assert client.get(made["links"]["self"]).json()["status"] == "done"
    engine = FakeWorkerEngine()
    jobs.bind(jobs.Binding(judge=Judge(engine), store=Store(redis, settings), settings=settings))
    try:
        assert jobs.grade_chunk(made["id"], 0) == {"skipped": 1}
    finally:
        jobs.unbind()
    assert engine.done == 0
    assert len(client.get(made["links"]["results"], params={"limit": 100}).json()["items"]) == 4
