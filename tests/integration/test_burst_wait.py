"""Batches submitted together are shared as one backlog: before claiming, a fresh batch's job waits until no batch
was submitted for gather_quiet_s (at most gather_s after its own creation). Real Redis; the job's wait alone."""

from __future__ import annotations

import time

from redis import Redis

from juiz.engines.fake import FakeEngine
from juiz.judging.judge import Judge
from juiz.store import Store
from schemas import BatchOptions, Triple
from tests.integration.helpers import make_settings, triples
from workers.jobs import Binding, _settle


def test_a_fresh_batch_waits_for_the_burst_of_submissions_to_end(redis: Redis, redis_url: str) -> None:
    settings = make_settings(redis_url, gather_s=5.0, gather_quiet_s=0.3)
    store = Store(redis, settings)
    first, _ = store.create_batch("a", BatchOptions(), [Triple.model_validate(t) for t in triples(2)])
    second, _ = store.create_batch("b", BatchOptions(), [Triple.model_validate(t) for t in triples(2)])
    assert store.last_batch_at(first.queue) == second.created_at  # the newest submission of the queue
    _settle(Binding(Judge(FakeEngine(lambda _: "")), store, settings), first)
    settled = time.time()
    # Quiet since the second batch, and never as long as the first batch's gather_s: it was read (it used to be
    # written nowhere, so the wait ended at once).
    assert second.created_at + settings.gather_quiet_s <= settled < first.created_at + settings.gather_s
