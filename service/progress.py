"""Waiting for a batch's progress on its events stream (`batch:{id}:events`, written with every results write and
by a cancel), so /v1/grade and NDJSON followers wake when something happened rather than on a timer."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis as AsyncRedis

from juiz.store import Store, text

START = "0-0"  # a cursor before every event: the first wait returns at once if anything happened already


async def wait_for_progress(redis: AsyncRedis, batch_id: str, cursor: str, timeout_s: float) -> str:
    """Block until the batch has an event newer than `cursor`, or `timeout_s`; returns the newest id seen."""
    key = Store.batch_key(batch_id, "events")
    reply: Any = await redis.xread({key: cursor}, count=100, block=max(1, int(timeout_s * 1000)))
    return text(reply[0][1][-1][0]) if reply else cursor
