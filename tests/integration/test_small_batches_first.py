"""Small batches first: a small batch of another tenant, submitted while every worker is deep in a chunk of a large
backlog on the default judge, is graded between (or by cutting) the running engine calls, not after them. Real
Redis, two real worker processes on the FAKE engine at 1 s per call + 10 ms per conversation."""

from __future__ import annotations

from redis import Redis

from bench.fake_worker import RUNNING_KEY
from juiz.store import Store
from schemas import BatchOptions, Triple
from tests.integration.fake_workers import Workers, wait_until
from tests.integration.helpers import make_settings, triples

SMALL_BATCH_BOUND_S = 10.0  # a 256-item chunk of the default judge takes ~25 s here: the bound is well below it


def test_a_small_batch_is_graded_within_a_wave_of_a_deep_backlog(
    redis: Redis, redis_url: str, workers: Workers
) -> None:
    # The production shape (32-item chunks, 256-item calls), the default judge (a reference, then the checks).
    settings = make_settings(redis_url, chunk_size=32, coalesce_max_items=256, job_timeout_s=600)
    store = Store(redis, settings)
    options = BatchOptions()
    for _ in range(2):
        workers.start(settings, JUIZ_FAKE_CALL_S="1", JUIZ_FAKE_CONVERSATION_S="0.01")
    backlog = [
        store.create_batch("a", options, [Triple.model_validate(t) for t in triples(256, start=256 * n)])[0]
        for n in range(4)
    ]
    wait_until(lambda: redis.llen(RUNNING_KEY) == 2, "both workers in an engine call of the backlog")

    small, _ = store.create_batch("b", options, [Triple.model_validate(t) for t in triples(8, start=90_000)])
    wait_until(lambda: (r := store.get_batch(small.id)) is not None and r.terminal, "the small batch")

    done = store.get_batch(small.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 8, done
    # Graded ahead of the chunks both workers were grading when it came: none of those is stored yet.
    assert sum(store.result_count(batch.id) for batch in backlog) == 0
    assert (done.finished_at or 0) - small.created_at <= SMALL_BATCH_BOUND_S, done
    for batch in backlog:  # the rest of the backlog only had to be there
        record = store.get_batch(batch.id)
        if record is not None and not record.terminal:
            store.cancel_batch(record)
    wait_until(lambda: redis.llen(RUNNING_KEY) == 0, "the workers' calls to end", timeout_s=60)
