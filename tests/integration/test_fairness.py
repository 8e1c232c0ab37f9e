"""Fairness under any backlog depth: a small batch of another tenant rides in the next job however many chunks one
tenant queued before it, graded first in a call of its own. Real Redis, a real RQ worker on the FAKE engine."""

from __future__ import annotations

from typing import Any

from redis import Redis

from bench.fake_worker import FakeWorkerEngine
from juiz.store import Store
from schemas import BatchOptions, Triple
from tests.integration.helpers import make_settings, triples


def test_a_small_batch_is_not_stuck_behind_a_deep_backlog(redis: Redis, redis_url: str, run_worker: Any) -> None:
    # The production shape: 32-item chunks, 256 items per engine call; tenant A queues 40 batches of 256 first.
    settings = make_settings(redis_url, chunk_size=32, coalesce_max_items=256, gather_s=0)
    store = Store(redis, settings)
    cot = BatchOptions(prompt="answer_relevance@juiz-1")  # one engine call per chunk set (check prompts take two)
    backlog = [
        store.create_batch("a", cot, [Triple.model_validate(t) for t in triples(256, start=256 * n)])[0]
        for n in range(40)
    ]
    small, _ = store.create_batch("b", cot, [Triple.model_validate(t) for t in triples(8, start=90_000)])
    engine = FakeWorkerEngine(redis)

    run_worker(settings, max_jobs=1, worker_engine=engine)  # one job

    done = store.get_batch(small.id)
    assert done is not None and done.status.value == "done" and done.counts.ok == 8
    graded_of_a = sum(store.result_count(batch.id) for batch in backlog)
    assert graded_of_a == 7 * 32  # B's chunk took an A chunk's place in the first job, not one after 10,240 items
    assert engine.calls == [8, 7 * 32]  # and went first, in a call of its own (small batches first)
