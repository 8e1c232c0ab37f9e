"""Waiting for a batch's progress on its events stream (`batch:{id}:events`, written with every results write and
by a cancel), so /v1/grade and NDJSON followers wake when something happened rather than on a timer
(juiz.store.reads.AsyncReads.wait_for_progress)."""

from __future__ import annotations

from redis.asyncio import Redis as AsyncRedis

from juiz.store.reads import AsyncReads

START = "0-0"  # a cursor before every event: the first wait returns at once if anything happened already


async def wait_for_progress(reads: AsyncReads | AsyncRedis, batch_id: str, cursor: str, timeout_s: float) -> str:
    """Block until the batch has an event newer than `cursor`, or `timeout_s`; returns the newest id seen. Given the
    asyncio client itself (code written before the store's reads), the read still goes through the store."""
    source = reads if isinstance(reads, AsyncReads) else AsyncReads(reads)
    return await source.wait_for_progress(batch_id, cursor, timeout_s)
