"""Waits that block on events instead of polling: a batch's progress stream wakes /v1/grade and
NDJSON followers; a submission wakes a job gathering chunks. Real Redis."""

from __future__ import annotations

import asyncio
import threading
import time

import anyio
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from juiz.engines.fake import FakeEngine
from juiz.judging.judgements import failed_judgement
from juiz.judging.plan import provenance_by_metric
from juiz.runtime.settings import Settings
from juiz.store import Store
from juiz.store.reads import AsyncReads
from schemas import BatchOptions, Triple
from service.progress import START, wait_for_progress
from tests.integration.helpers import triples


def test_a_waiter_wakes_when_a_result_is_stored(redis: Redis, redis_url: str, settings: Settings) -> None:
    store = Store(redis, settings)
    triple = Triple.model_validate(triples(1)[0])
    batch, _ = store.create_batch("t", BatchOptions(), [triple])
    result = failed_judgement(
        triple,
        BatchOptions(),
        "stored by the test",
        provenance_by_metric(BatchOptions(), triple.question, FakeEngine(lambda _: "")),
    )

    async def scenario() -> None:
        client = AsyncRedis.from_url(redis_url)
        try:
            assert await wait_for_progress(AsyncReads(client), batch.id, START, 0.05) == START  # nothing yet: timed out
            waiter = asyncio.create_task(wait_for_progress(AsyncReads(client), batch.id, START, 60))
            await anyio.to_thread.run_sync(store.store_results, batch, [(0, result)])
            cursor = await asyncio.wait_for(waiter, 10)  # on the event, long before its 60 s
            assert cursor != START
            assert await wait_for_progress(AsyncReads(client), batch.id, cursor, 0.05) == cursor  # nothing newer
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_a_gathering_job_wakes_when_a_batch_is_submitted(redis: Redis, settings: Settings) -> None:
    store = Store(redis, settings)
    cursor = store.chunk_events_cursor(settings.queue)
    woke: list[str] = []
    waiter = threading.Thread(target=lambda: woke.append(store.wait_for_chunks(settings.queue, cursor, 60)))
    started = time.monotonic()
    waiter.start()
    store.create_batch("t", BatchOptions(), [Triple.model_validate(t) for t in triples(2)])
    waiter.join(timeout=30)
    assert woke and woke[0] != cursor
    assert time.monotonic() - started < 30  # woken by the submission, not by its 60 s timeout
