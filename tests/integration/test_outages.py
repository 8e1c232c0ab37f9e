"""Redis outages at the points where a worker used to lose chunks or quit.

A private redis-server with its append-only file on is stopped and started again: the outage itself (its length, a
few seconds, longer than redis-py's own reconnect retries) is the fault under test. Everything else waits on state
with a deadline. Real RQ workers (in process, or `bench.fake_worker` subprocesses) on the FAKE engine.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from rq.worker import Worker

from bench.fake_worker import FakeWorkerEngine
from juiz.engines.base import CallControl, Completion, Conversation, GenerationRequest
from juiz.runtime.errors import TransientEngineError
from juiz.runtime.settings import Settings
from juiz.store import Store
from schemas import BatchOptions, Triple
from tests.integration.fake_workers import Workers, graded_counts, wait_until
from tests.integration.helpers import AofRedis, make_settings, triples
from workers import jobs
from workers.scheduler import enqueue_due_retries
from workers.worker import build_worker

OUTAGE_S = 3.0  # how long Redis stays away: the fault injected, not a wait for an event
RESTARTS = 6
LONG_OUTAGE_S = 8.0  # many times redis_retry_s (0.2 s) and every retry of RQ's bookkeeping it sets off


class Outage:
    """Redis shut down now and started again OUTAGE_S later, from a thread, so the code under test meets it."""

    def __init__(self, server: AofRedis) -> None:
        self.server = server
        self.thread: threading.Thread | None = None
        self.over = threading.Event()

    def begin(self) -> None:
        self.server.shutdown()

        def restart() -> None:
            time.sleep(OUTAGE_S)
            self.server.start()
            self.over.set()

        self.thread = threading.Thread(target=restart, daemon=True)
        self.thread.start()

    def join(self) -> None:
        if self.thread is not None:
            self.thread.join(timeout=60)


def as_triples(items: list[dict[str, Any]]) -> list[Triple]:
    return [Triple.model_validate(item) for item in items]


def run_burst_worker(settings: Settings, redis: Redis, engine: Any) -> None:
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    worker = build_worker(settings, redis, engine)
    try:
        enqueue_due_retries(settings, redis)  # as workers.worker.run's burst mode does; never RQ's forked scheduler
        worker.work(burst=True, logging_level="WARNING")
    finally:
        jobs.unbind()
        # RQ's worker installs its own SIGINT/SIGTERM handlers: later tests in this process expect Python's
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])


def outage_settings(url: str, **overrides: Any) -> Settings:
    # One worker takes all four chunks in one call (coalescing), so every chunk but its own was taken from another job.
    values: dict[str, Any] = {"chunk_size": 4, "coalesce_max_items": 16, "gather_s": 0, "heartbeat_ttl_s": 60}
    return make_settings(url, **{**values, **overrides})


def test_an_outage_between_claim_and_load_loses_no_chunk(aof_redis: AofRedis, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = outage_settings(aof_redis.url)
    redis = Redis.from_url(aof_redis.url)
    store = Store(redis, settings)
    batch, _ = store.create_batch("t", BatchOptions(), as_triples(triples(16)))
    outage = Outage(aof_redis)
    claim = Store.claim

    def claim_then_outage(self: Store, *args: Any, **kwargs: Any) -> Any:
        result = claim(self, *args, **kwargs)
        if outage.thread is None:
            outage.begin()  # Redis goes away right after the job took its chunks, before it loads their items
        return result

    monkeypatch.setattr(Store, "claim", claim_then_outage)
    run_burst_worker(settings, redis, FakeWorkerEngine(redis))
    outage.join()

    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 16
    assert graded_counts(redis) == {str(i): 1 for i in range(16)}
    redis.close()


class FailingInOutage(FakeWorkerEngine):
    """FAKE engine whose first call starts an outage and then fails with a transient error (its server went too)."""

    def __init__(self, redis: Redis, outage: Outage) -> None:
        super().__init__(redis)
        self.outage = outage
        self.attempts = 0

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.attempts += 1
        if self.attempts == 1:
            self.outage.begin()
            raise TransientEngineError("the judge server went away with Redis")
        return super().generate(conversations, request, control)


def test_a_call_failing_during_an_outage_gives_every_chunk_back(aof_redis: AofRedis) -> None:
    # Released while Redis is away, the chunks used to be neither pending, owned nor queued: the batch stayed queued.
    settings = outage_settings(aof_redis.url)
    redis = Redis.from_url(aof_redis.url)
    store = Store(redis, settings)
    batch, _ = store.create_batch("t", BatchOptions(), as_triples(triples(16)))
    engine = FailingInOutage(redis, Outage(aof_redis))

    run_burst_worker(settings, redis, engine)
    engine.outage.join()

    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 16
    assert graded_counts(redis) == {str(i): 1 for i in range(16)}
    assert engine.attempts >= 2
    redis.close()


def test_a_worker_outlives_an_outage_longer_than_its_retries(
    aof_redis: AofRedis, workers: Workers, tmp_path: Path
) -> None:
    # Redis goes away just before the job stores its call's results, for longer than the job retries its writes
    # (redis_retry_s): the job fails, RQ's bookkeeping fails, and RQ's work loop quits. The worker used to exit.
    settings = make_settings(aof_redis.url, redis_retry_s=0.2, heartbeat_ttl_s=3, gather_s=0)
    redis = Redis.from_url(aof_redis.url)
    store = Store(redis, settings)
    events = tmp_path / "events"
    events.mkdir()
    (events / "hold").touch()
    worker = workers.start(settings, JUIZ_FAKE_EVENTS_DIR=str(events))
    batch, _ = store.create_batch("t", BatchOptions(), as_triples(triples(4)))

    wait_until(lambda: (events / "call-1-returned").exists(), "the first engine call to return")
    aof_redis.shutdown()
    (events / "hold").unlink()
    (events / "go-on").touch()
    time.sleep(LONG_OUTAGE_S)  # the outage under test
    assert worker.poll() is None, "the worker exited while Redis was away"
    aof_redis.start()

    wait_until(lambda: (b := store.get_batch(batch.id)) is not None and b.terminal, "the batch, after the outage")
    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 4
    assert worker.poll() is None  # still serving
    after, _ = store.create_batch("t", BatchOptions(), as_triples(triples(4, start=4)))
    wait_until(lambda: (b := store.get_batch(after.id)) is not None and b.terminal, "a batch submitted after it")
    assert worker.poll() is None
    redis.close()


class WritesToRedis(FakeWorkerEngine):
    """FAKE engine that writes to Redis as its call starts, without retrying: its first call meets an outage (a
    real redis ConnectionError), its second an OSError; the third grades."""

    def __init__(self, redis: Redis, outage: Outage) -> None:
        super().__init__(redis)
        self.outage = outage
        self.attempts = 0

    def generate(
        self, conversations: Sequence[Conversation], request: GenerationRequest, control: CallControl | None = None
    ) -> list[Completion]:
        self.attempts += 1
        if self.attempts == 1:
            self.outage.begin()
            assert self.counts is not None
            self.counts.incr("fake-engine:own-write")  # raises: Redis is away
        if self.attempts == 2:
            raise OSError("connection reset by peer")
        return super().generate(conversations, request, control)


def test_infrastructure_faults_in_the_engine_send_the_chunk_back_instead_of_failing_it(aof_redis: AofRedis) -> None:
    settings = outage_settings(aof_redis.url, retry_backoff_s="0,0,0")
    redis = Redis.from_url(aof_redis.url)
    store = Store(redis, settings)
    batch, _ = store.create_batch("t", BatchOptions(), as_triples(triples(8)))
    engine = WritesToRedis(redis, Outage(aof_redis))

    run_burst_worker(settings, redis, engine)
    engine.outage.join()

    done = store.get_batch(batch.id)
    assert done is not None and done.status.value == "done"
    assert done.counts.ok == 8 and done.counts.failed == 0  # failed for good before: "ConnectionError: ..."
    assert engine.attempts >= 3  # the failed call, the OSError, then grading (the chunks may go in separate calls)
    assert graded_counts(redis) == {str(i): 1 for i in range(8)}
    redis.close()


def test_restarts_during_a_batch_lose_nothing_and_keep_the_workers(aof_redis: AofRedis, workers: Workers) -> None:
    # Redis restarted at whatever point the workers are at each time the batch has made progress; outages of 0.5-3 s,
    # some longer than the jobs' own retries (redis_retry_s=1): what is left half-done, the sweeper finds.
    settings = make_settings(
        aof_redis.url,
        chunk_size=8,
        coalesce_max_items=32,
        gather_s=0,
        heartbeat_ttl_s=3,
        redis_retry_s=1,
        sweep_grace_s=3,
        sweep_interval_s=1,
    )
    redis = Redis.from_url(aof_redis.url)
    store = Store(redis, settings)
    batch, _ = store.create_batch("t", BatchOptions(), as_triples(triples(400)))
    pool = [workers.start(settings, JUIZ_FAKE_CALL_S="0.3") for _ in range(2)]
    rng = random.Random(17)

    def done() -> int:
        record = store.get_batch(batch.id)
        return record.counts.done if record is not None else 0

    for _ in range(RESTARTS):
        before = done()
        wait_until(lambda before=before: done() > before, "progress since the last restart")  # type: ignore[misc]
        if done() >= 400:
            break
        aof_redis.shutdown()
        time.sleep(rng.uniform(0.5, 3.0))  # the outage under test
        aof_redis.start()

    wait_until(lambda: (b := store.get_batch(batch.id)) is not None and b.terminal, "the batch, after the restarts")
    record = store.get_batch(batch.id)
    errors = {j.error for j in store.results_in_input_order(batch.id) if j.status.value != "ok"}
    assert record is not None and record.status.value == "done" and record.counts.ok == 400, errors
    ids = [j.id for j in store.results_in_input_order(batch.id)]
    assert sorted(ids) == sorted(f"t{i}" for i in range(400))  # every item stored once
    assert all(worker.poll() is None for worker in pool)  # both still serving
    redis.close()


def test_a_worker_asked_to_stop_while_redis_is_away_stops(aof_redis: AofRedis, workers: Workers) -> None:
    # Waiting for Redis without a deadline must not make a worker deaf to SIGTERM (docker stop during an outage).
    settings = make_settings(aof_redis.url)
    redis = Redis.from_url(aof_redis.url)
    worker = workers.start(settings)
    wait_until(lambda: len(Worker.all(connection=redis)) == 1, "the worker to register")
    aof_redis.shutdown()
    worker.send_signal(signal.SIGTERM)
    wait_until(lambda: worker.poll() is not None, "the worker to stop", timeout_s=60)
    redis.close()
