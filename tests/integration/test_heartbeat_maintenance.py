"""A busy worker's heartbeat thread hands a dead worker's chunks back (the chaos benchmark's log had "ValueError: signal
only works in main thread").

Busy workers run RQ's maintenance from their heartbeat thread, so a worker killed mid-call is noticed even when every
other worker is in a long engine call. RQ's StartedJobRegistry cleanup runs the abandoned job's failure callback
(`on_chunk_failure`: its chunks back to `pending`) under a death penalty; the signal-based one only works in the main
thread. Here the state is made without timing: a worker starts a job, claims its chunks and goes silent (as if
SIGKILLed); once its StartedJobRegistry entry has expired, another worker's Heartbeat thread runs. Real Redis, real
`JuizWorker`s on the FAKE engine; waits on state with a deadline.
"""

from __future__ import annotations

import logging

import pytest
from redis import Redis
from rq.registry import StartedJobRegistry

from bench.fake_worker import FakeWorkerEngine
from juiz.store import ChunkRef, Store, text
from juiz.store.keys import batch_key, pending_key
from schemas import BatchOptions, Triple
from tests.integration.fake_workers import wait_until
from tests.integration.helpers import make_settings, triples
from workers import jobs
from workers.worker import Heartbeat, JuizWorker, build_worker


def start_job(worker: JuizWorker) -> tuple[str, Heartbeat]:
    """RQ's own steps for a job this worker dequeues and starts (as `execute_job` then `perform_job` do); returns the
    job id and the Heartbeat this worker would run while the job's engine call goes on (not started)."""
    result = worker.queue_class.dequeue_any(
        worker.queues, None, connection=worker.connection, serializer=worker.serializer
    )
    assert result is not None
    job, _ = result
    execution = worker.prepare_execution(job)
    worker.prepare_job_execution(job, remove_from_intermediate_queue=True)
    return job.id, Heartbeat(worker, job, execution)


def test_a_busy_workers_heartbeat_hands_a_dead_workers_chunks_back(
    redis: Redis, redis_url: str, engine: FakeWorkerEngine, caplog: pytest.LogCaptureFixture
) -> None:
    # Silence for 2 s = dead. No sweeper (its grace is an hour): only the failure callback can give the chunks back.
    settings = make_settings(
        redis_url, chunk_size=2, coalesce_max_items=4, heartbeat_interval_s=0.2, heartbeat_ttl_s=2, sweep_grace_s=3600
    )
    store = Store(redis, settings)
    queue = store.rq_queue(settings.queue)
    batch, _ = store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(4)])  # 2 chunks
    try:
        # The doomed worker starts chunk 0's job, claims it and chunk 1 for one call, then beats no more.
        doomed = build_worker(settings, redis, engine, name="doomed")
        doomed.register_birth()
        job_id, _ = start_job(doomed)
        own = ChunkRef(batch.id, 0)
        assert store.claim(settings.queue, job_id, doomed.key, own=own) is not None
        held = [own, *store.owned(job_id)]
        assert sorted(c.chunk_no for c in held) == [0, 1] and store.pending_chunk_count(settings.queue) == 0
        started = StartedJobRegistry(queue=queue)
        wait_until(lambda: job_id in started.get_expired_job_ids(), "the doomed job's registry entry to expire")

        # Another worker, busy with a job of its own: its heartbeat thread runs RQ's maintenance when due.
        store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(1, start=10)])
        survivor = build_worker(settings, redis, engine, name="survivor")
        survivor.register_birth()
        _, beat = start_job(survivor)
        with caplog.at_level(logging.WARNING):
            beat.start()
            try:
                wait_until(lambda: job_id not in started.get_job_ids(cleanup=False), "maintenance to take the job")
            finally:
                beat.stop()
    finally:
        jobs.unbind()

    assert redis.hget(batch_key(batch.id, "abandoned"), "0") == b"1"  # the failure callback ran
    assert store.owned(job_id) == [] and redis.hgetall(batch_key(batch.id, "owner")) == {}
    pending = {text(m) for m in redis.zrange(pending_key(settings.queue), 0, -1)}
    assert {c.member for c in held} <= pending  # both chunks back (the survivor's own chunk is still pending too)
    assert "signal only works in main thread" not in caplog.text
