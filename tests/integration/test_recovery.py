"""Faults: a worker SIGKILLed mid-call, a dead engine, a cancel mid-call, transient engine faults (retried),
permanent ones (items failed). Real RQ workers on the FAKE engine; tests wait on events in Redis, never on sleeps."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis
from rq import Queue
from rq.exceptions import AbandonedJobError
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker_registration import get_keys

from bench.fake_worker import ABORTED_KEY, RUNNING_KEY, STARTED_KEY, FakeWorkerEngine
from juiz.runtime.errors import EngineError, TransientEngineError
from juiz.runtime.settings import Settings
from juiz.store import ChunkRef, Store, text
from schemas import BatchOptions, Triple
from tests.integration.fake_workers import WAIT_S, FlakyEngine, Workers, graded_counts, wait_until
from tests.integration.helpers import make_settings, queued_jobs, triples
from workers import jobs
from workers.jobs import MAX_ABANDONED, on_chunk_failure
from workers.worker import build_worker

# Tests counting engine calls, attempts or aborted requests pin the CoT prompt: one conversation per item in one call.
# The default (check-based) asks several yes/no questions per item in two waves (juiz.judging.checks); the fake worker
# answers both, and counts an item graded once per metric either way.
COT = {"prompt": "answer_relevance@juiz-1"}
MakeClient = Callable[[Settings], TestClient[Litestar]]


def stored_ids(client: TestClient[Litestar], batch: dict[str, Any], **headers: str) -> list[str]:
    page = client.get(batch["links"]["results"], params={"limit": 1000}, headers=headers).json()
    return [r["id"] for r in page["items"]]


def status(client: TestClient[Litestar], batch: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return dict(client.get(batch["links"]["self"], headers=headers).json())


def test_a_worker_killed_mid_call_is_taken_over_and_every_item_is_stored_once(
    make_client: MakeClient, redis_url: str, redis: Redis, workers: Workers
) -> None:
    # A long call (60 s) on the worker we kill; the survivor's calls are short. Silence for 3 s = dead.
    settings = make_settings(
        redis_url, chunk_size=2, coalesce_max_items=4, heartbeat_interval_s=0.5, heartbeat_ttl_s=3, job_timeout_s=600
    )
    client = make_client(settings)
    batch = client.post("/v1/batches", json={"items": triples(8)}).json()

    doomed = workers.start(settings, JUIZ_FAKE_CALL_S="60")
    wait_until(lambda: redis.llen(RUNNING_KEY) == 1, "the doomed worker's engine call")
    doomed_call = redis.lindex(RUNNING_KEY, 0)
    survivor = workers.start(settings, JUIZ_FAKE_CALL_S="0.1")
    wait_until(lambda: graded_counts(redis) != {}, "the survivor to grade what was not taken")
    # the doomed call still holds its chunks (the survivor may be inside a call of its own too)
    assert doomed_call is not None and doomed_call in redis.lrange(RUNNING_KEY, 0, -1)
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)

    wait_until(lambda: status(client, batch)["status"] == "done", "the survivor to take over the killed call")

    assert graded_counts(redis) == {str(i): 1 for i in range(8)}  # every item graded to completion once
    assert sorted(stored_ids(client, batch)) == sorted(f"t{i}" for i in range(8))  # and stored once
    assert status(client, batch)["counts"]["ok"] == 8
    assert survivor.poll() is None


def test_one_large_batch_is_shared_by_the_idle_workers(
    make_client: MakeClient, redis_url: str, redis: Redis, workers: Workers
) -> None:
    # 4 chunks of 4 items, calls of up to 16: alone, one worker would take all 16 in one call.
    settings = make_settings(redis_url, chunk_size=4, coalesce_max_items=16, gather_s=0)
    client = make_client(settings)
    for _ in range(2):
        workers.start(settings, JUIZ_FAKE_CALL_S="5")
    wait_until(lambda: len(get_keys(connection=redis)) == 2, "both workers to register")
    batch = client.post("/v1/batches", json={"items": triples(16)}).json()

    wait_until(lambda: redis.llen(RUNNING_KEY) == 2, "both workers to be grading")
    # each call's items (a call may hold several conversations of one item: checks-4's first wave adds one sentence)
    calls = [set(text(entry).split(",")) for entry in redis.lrange(RUNNING_KEY, 0, -1)]
    assert sorted(len(c) for c in calls) == [8, 8]  # a fair share each
    assert sorted(m for c in calls for m in c) == sorted(str(i) for i in range(16))  # nothing graded twice
    wait_until(lambda: status(client, batch)["status"] == "done", "the batch")
    assert graded_counts(redis) == {str(i): 1 for i in range(16)}
    assert queued_jobs(redis, settings) == 0  # the coalesced chunks' jobs were taken out of the queue, not re-run


def test_a_dead_engine_stops_its_worker_and_another_one_does_the_work(
    make_client: MakeClient, redis_url: str, redis: Redis, workers: Workers, run_worker: Any
) -> None:
    settings = make_settings(redis_url, chunk_size=2, coalesce_max_items=4)
    client = make_client(settings)
    batch = client.post("/v1/batches", json={"items": triples(6)}).json()

    dead = workers.start(settings, JUIZ_FAKE_DEAD="1")
    assert dead.wait(timeout=WAIT_S) == 3  # ENGINE_DEAD_EXIT
    assert int(redis.get(STARTED_KEY) or 0) == 1 and graded_counts(redis) == {}
    assert get_keys(connection=redis) == set()  # deregistered: /ready no longer counts it
    assert status(client, batch)["counts"]["done"] == 0  # nothing stored

    run_worker(settings)

    assert graded_counts(redis) == {str(i): 1 for i in range(6)}
    assert status(client, batch)["status"] == "done"


def test_a_batch_cancelled_mid_call_is_aborted_in_the_engine_and_the_other_tenant_goes_on(
    make_client: MakeClient, redis_url: str, redis: Redis, workers: Workers
) -> None:
    settings = make_settings(redis_url, api_keys="alice:key-a,bob:key-b", chunk_size=2, coalesce_max_items=8)
    client = make_client(settings)
    alice = client.post(
        "/v1/batches", json={"items": triples(4), "options": COT}, headers={"Authorization": "Bearer key-a"}
    ).json()
    bob = client.post(
        "/v1/batches", json={"items": triples(4, start=4), "options": COT}, headers={"Authorization": "Bearer key-b"}
    ).json()

    workers.start(settings, JUIZ_FAKE_CALL_S="5")
    wait_until(lambda: redis.llen(RUNNING_KEY) == 1, "the shared engine call")
    call = text(redis.lindex(RUNNING_KEY, 0) or b"").split(",")
    assert sorted(call) == [str(i) for i in range(8)]  # both tenants' items in one call
    assert client.delete(alice["links"]["self"], headers={"Authorization": "Bearer key-a"}).status_code in (200, 202)

    wait_until(lambda: status(client, bob, "key-b")["status"] == "done", "bob's batch")
    aborted = {text(k): int(v) for k, v in redis.hgetall(ABORTED_KEY).items()}
    assert aborted == {str(i): 1 for i in range(4)}  # alice's requests aborted, nothing else
    assert graded_counts(redis) == {str(i): 1 for i in range(4, 8)}
    view = status(client, alice, "key-a")
    assert view["status"] == "cancelled" and view["counts"]["done"] == 0


def test_a_transient_fault_is_retried(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    batch = client.post("/v1/batches", json={"items": triples(3), "options": COT}).json()
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
    assert redis.zcard(f"juiz:pending:{{{settings.queue}}}") == 0


def test_a_permanent_fault_fails_the_items_without_retrying(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    batch = client.post("/v1/batches", json={"items": triples(2), "options": COT}).json()
    engine = FlakyEngine(redis, EngineError("input too long"), failures=100)
    run_worker(settings, worker_engine=engine)
    assert engine.attempts == 3  # one batched call, then the judge isolates each item once: no RQ retry
    results = client.get(batch["links"]["results"]).json()["items"]
    assert {r["status"] for r in results} == {"failed"}
    assert all("input too long" in r["error"] for r in results)
    assert client.get(batch["links"]["self"]).json()["status"] == "failed"


def test_a_chunk_whose_workers_keep_dying_is_failed_after_a_few_tries(
    redis: Redis, settings: Settings, engine: FakeWorkerEngine
) -> None:
    store = Store(redis, settings)
    batch, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(2)])
    build_worker(settings, redis, engine)  # binds the job module, as in a worker process
    try:
        for death in range(MAX_ABANDONED + 1):
            # A worker dequeues the chunk's job, claims the chunk, and dies; maintenance reports the job abandoned.
            queue = Queue(settings.queue, connection=redis, serializer=JSONSerializer)
            [job_id] = queue.job_ids
            queue.remove(job_id)
            job = Job.fetch(job_id, connection=redis, serializer=JSONSerializer)
            assert store.claim(settings.queue, job_id, "rq:worker:doomed", own=ChunkRef(batch.id, 0)) is not None
            on_chunk_failure(job, redis, AbandonedJobError, AbandonedJobError(), None)
            given_back = death < MAX_ABANDONED
            assert queued_jobs(redis, settings) == (1 if given_back else 0)
    finally:
        jobs.unbind()
    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "failed" and done.counts.failed == 2
    assert all("workers died" in (r.error or "") for r in store.results_in_input_order(batch.id))
