"""Redis and API faults: a Redis restart (with AOF) while a worker is mid-call, an API dying between claiming an
Idempotency-Key and writing its batch, an API restarted mid-batch; the result cache kept per tenant; the priority
queue bounded. Real RQ workers on the FAKE engine; waits are on events, never sleeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient
from redis import Redis

from bench.fake_worker import GRADED_KEY, RUNNING_KEY
from juiz.runtime.settings import Settings
from juiz.store import IdempotencyConflict, Store
from juiz.store.batches import Batches
from schemas import BatchOptions, Triple
from service.app import create_app
from tests.integration.fake_workers import Workers, graded_counts, wait_until
from tests.integration.helpers import AofRedis, juiz_keys, make_settings, queued_jobs, triples


def as_triples(items: list[dict[str, Any]]) -> list[Triple]:
    return [Triple.model_validate(item) for item in items]


def test_a_busy_worker_rides_out_a_redis_restart_and_stores_each_item_once(
    aof_redis: AofRedis, workers: Workers, tmp_path: Path
) -> None:
    # A long heartbeat TTL: this test is about the outage, not about taking the worker for dead.
    settings = make_settings(aof_redis.url, chunk_size=2, coalesce_max_items=4, heartbeat_ttl_s=60)
    redis = Redis.from_url(aof_redis.url)
    store = Store(redis, settings)
    batch, _ = store.create_batch("t", BatchOptions(), as_triples(triples(8)))
    events = tmp_path / "events"
    events.mkdir()
    worker = workers.start(settings, JUIZ_FAKE_CALL_S="2", JUIZ_FAKE_EVENTS_DIR=str(events))

    wait_until(lambda: redis.llen(RUNNING_KEY) == 1, "the worker's first engine call")
    aof_redis.shutdown()
    wait_until(lambda: (events / "call-1-done").exists(), "the call to end while Redis is down")
    aof_redis.start()

    wait_until(lambda: (b := store.get_batch(batch.id)) is not None and b.terminal, "the batch, after the restart")
    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 8
    assert sorted(j.id for j in store.results_in_input_order(batch.id)) == sorted(f"t{i}" for i in range(8))
    assert graded_counts(redis) == {str(i): 1 for i in range(8)}  # nothing graded twice, nothing lost
    assert worker.poll() is None  # the worker is still serving
    redis.close()


def test_a_crash_before_the_batch_is_written_leaves_no_idempotency_key(
    redis: Redis, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(redis, settings)
    items = as_triples(triples(3))
    write = Batches._write

    def crash(self: Batches, record: Any, items: Any, pipe: Any) -> None:
        write(self, record, items, pipe)  # everything queued in the transaction ...
        raise SystemExit("the API process dies before EXEC")  # ... and never executed

    monkeypatch.setattr(Batches, "_write", crash)
    with pytest.raises(SystemExit):
        store.create_batch("t", BatchOptions(), items, idempotency_key="key-1", fingerprint="f1")
    assert juiz_keys(redis) == [] and queued_jobs(redis, settings) == 0  # no key, no batch, no job

    monkeypatch.setattr(Batches, "_write", write)
    first, created = store.create_batch("t", BatchOptions(), items, idempotency_key="key-1", fingerprint="f1")
    assert created  # the client's retry creates the batch
    again, created_again = store.create_batch("t", BatchOptions(), items, idempotency_key="key-1", fingerprint="f1")
    assert not created_again and again.id == first.id
    with pytest.raises(IdempotencyConflict):
        store.create_batch("t", BatchOptions(), items, idempotency_key="key-1", fingerprint="other")
    assert queued_jobs(redis, settings) == 1


def test_the_result_cache_is_per_tenant_and_marks_cached_results(redis: Redis, redis_url: str, run_worker: Any) -> None:
    settings = make_settings(redis_url)
    store = Store(redis, settings)
    items = as_triples(triples(3))
    first, _ = store.create_batch("alice", BatchOptions(), items)
    run_worker(settings)
    bob, _ = store.create_batch("bob", BatchOptions(), items)
    alice_again, _ = store.create_batch("alice", BatchOptions(), items)
    run_worker(settings)

    assert {r.cached for r in store.results_in_input_order(first.id)} == {False}
    assert {r.cached for r in store.results_in_input_order(bob.id)} == {False}  # graded again: not alice's cache
    assert {r.cached for r in store.results_in_input_order(alice_again.id)} == {True}
    assert graded_counts(redis) == {str(i): 2 for i in range(3)}  # once for alice, once for bob
    assert redis.hget("juiz:metrics", "cache_hits") == b"3"  # one global counter, no tenant in it

    shared = make_settings(redis_url, shared_result_cache=True)
    carol, _ = store.create_batch("carol", BatchOptions(), items)
    run_worker(shared)
    dave, _ = store.create_batch("dave", BatchOptions(), items)
    run_worker(shared)
    assert {r.cached for r in store.results_in_input_order(carol.id)} == {False}
    assert {r.cached for r in store.results_in_input_order(dave.id)} == {True}  # shared only by explicit opt-in
    assert redis.hlen(GRADED_KEY) == 3


def test_the_priority_queue_cannot_starve_batches(redis: Redis, redis_url: str, run_worker: Any) -> None:
    settings = make_settings(redis_url, chunk_size=1, coalesce_max_items=1, priority_burst=2, gather_s=0)
    store = Store(redis, settings)
    graded = [
        store.create_batch("t", BatchOptions(), as_triples(triples(1, start=i)), priority=True)[0] for i in range(6)
    ]
    batch, _ = store.create_batch("t", BatchOptions(), as_triples(triples(1, start=10)))

    run_worker(settings, max_jobs=3)  # two /v1/grade jobs in a row, then the batch's turn

    assert store.result_count(batch.id) == 1
    assert sum(store.result_count(b.id) for b in graded) == 2


def test_an_api_restarted_mid_batch_loses_nothing(redis: Redis, redis_url: str, run_worker: Any) -> None:
    settings = make_settings(redis_url, chunk_size=2, coalesce_max_items=2)
    with TestClient(create_app(settings, redis)) as first:
        batch = first.post("/v1/batches", json={"items": triples(6)}).json()
    run_worker(settings, max_jobs=1)  # graded while no API is up

    with TestClient(create_app(settings, redis)) as second:  # a new API process: everything is in Redis
        assert second.get(batch["links"]["self"]).json()["counts"]["done"] == 2
        run_worker(settings)
        view = second.get(batch["links"]["self"]).json()
        ids = [r["id"] for r in second.get(batch["links"]["results"], params={"limit": 100}).json()["items"]]
    assert view["status"] == "done" and sorted(ids) == sorted(f"t{i}" for i in range(6))
    assert graded_counts(redis) == {str(i): 1 for i in range(6)}
