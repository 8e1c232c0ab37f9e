"""The sweeper (juiz.store.sweeper): chunks no job would grade are queued again; chunks with a live job are left alone.
Real Redis and real RQ workers on the FAKE engine."""

from __future__ import annotations

from typing import Any

from prometheus_client import generate_latest
from redis import Redis
from rq import Queue
from rq.registry import ScheduledJobRegistry

from juiz.runtime.errors import TransientEngineError
from juiz.runtime.settings import Settings
from juiz.store import ChunkRef, Store
from juiz.store.sweeper import sweep
from schemas import BatchOptions, Triple
from service.metrics import registry_for
from tests.integration.fake_workers import FlakyEngine, graded_counts
from tests.integration.helpers import make_settings, triples


def scrape(store: Store) -> str:
    """What /metrics serves (its collector, read without the route's access rules)."""
    return generate_latest(registry_for(store)).decode()


def orphan_two_chunks(store: Store, settings: Settings) -> Any:
    """A batch of three chunks: chunk 0's job lost between queue and worker (its record says queued, no queue has
    it), chunk 1 owned by a job that died without a trace; chunk 2 as it should be."""
    batch, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(12)])
    queue = store.rq_queue(settings.queue)
    lost = store.redis.hget(store.batch_key(batch.id, "chunkjobs"), "0")
    assert lost is not None
    queue.remove(lost.decode())
    assert store.claim(settings.queue, "gone-job", "rq:worker:gone", own=ChunkRef(batch.id, 1), budget=0)
    return batch


def test_the_sweeper_requeues_only_chunks_no_job_would_grade(redis: Redis, redis_url: str, run_worker: Any) -> None:
    settings = make_settings(redis_url, sweep_grace_s=0, gather_s=0)
    store = Store(redis, settings)
    batch = orphan_two_chunks(store, settings)

    report = sweep(store, "test", force=True)

    assert report is not None and report.stalled == 1
    assert sorted(report.swept) == [ChunkRef(batch.id, 0), ChunkRef(batch.id, 1)]  # chunk 2's job is queued
    metrics = scrape(store)
    assert "juiz_chunks_swept_total 2.0" in metrics and "juiz_batches_stalled 1.0" in metrics
    run_worker(settings)
    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 12
    assert graded_counts(redis) == {str(i): 1 for i in range(12)}
    again = sweep(store, "test", force=True)
    assert again is not None and again.swept == [] and again.stalled == 0
    assert "juiz_batches_stalled 0.0" in scrape(store)


def test_the_sweeper_leaves_queued_and_running_chunks_alone(redis: Redis, redis_url: str) -> None:
    settings = make_settings(redis_url, sweep_grace_s=0)
    store = Store(redis, settings)
    store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(12)])
    report = sweep(store, "test", force=True)
    assert report is not None and report.batches_checked == 1 and report.swept == []
    assert Queue(settings.queue, connection=redis).count == 3  # nothing queued twice


def test_one_sweeper_at_a_time(redis: Redis, redis_url: str) -> None:
    store = Store(redis, make_settings(redis_url, sweep_interval_s=60))
    assert sweep(store, "first") is not None
    assert sweep(store, "second") is None  # the first holds the lease for sweep_interval_s


def test_a_worker_sweeps_in_its_maintenance(redis: Redis, redis_url: str, run_worker: Any) -> None:
    settings = make_settings(redis_url, sweep_grace_s=0, gather_s=0)
    store = Store(redis, settings)
    batch = orphan_two_chunks(store, settings)

    run_worker(settings)  # its first maintenance pass sweeps, before it takes a job

    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 12
    assert graded_counts(redis) == {str(i): 1 for i in range(12)}


def test_a_chunk_waiting_for_its_retry_is_not_taken_by_other_jobs(
    redis: Redis, redis_url: str, run_worker: Any
) -> None:
    # Claims take any pending chunk (RQ's queue is never edited behind its back), so a chunk waiting out its retry
    # backoff must not be pending: it stays its job's until RQ runs that job again.
    settings = make_settings(redis_url, retry_backoff_s="3600", coalesce_max_items=16, gather_s=0, sweep_grace_s=0)
    store = Store(redis, settings)
    waiting, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(4)])
    run_worker(settings, max_jobs=1, worker_engine=FlakyEngine(redis, TransientEngineError("server down"), 1))
    other, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(4, start=4)])

    run_worker(settings)

    assert store.result_count(other.id) == 4
    assert store.result_count(waiting.id) == 0  # not graded before its retry is due
    assert redis.zcard(store.pending_key(settings.queue)) == 0
    assert len(ScheduledJobRegistry(queue=store.rq_queue(settings.queue))) == 1
    report = sweep(store, "test", force=True)  # its job is scheduled: alive, so the chunk is not swept either
    assert report is not None and report.swept == [] and report.batches_checked == 1
