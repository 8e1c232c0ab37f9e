"""A batch's items (the triples as submitted, in input order): a chunk's items still to grade, one item, a search."""

from __future__ import annotations

import json

from redis import Redis

from juiz.store.batches import BatchRecord
from juiz.store.keys import batch_key, text
from schemas import Triple


class Items:
    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    def of_chunk(self, batch: BatchRecord, chunk_no: int) -> list[tuple[int, Triple]]:
        """The chunk's items that have no stored result yet, with their index in the batch."""
        indices = batch.chunk_range(chunk_no)
        if not indices:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.lrange(batch_key(batch.id, "items"), indices.start, indices.stop - 1)
            pipe.hmget(batch_key(batch.id, "stored"), list(indices))
            raw_items, stored = pipe.execute()
        return [
            (index, Triple.model_validate_json(raw))
            for index, raw, done in zip(indices, raw_items, stored, strict=True)
            if done is None
        ]

    def at(self, batch_id: str, index: int) -> Triple | None:
        raw = self.redis.lindex(batch_key(batch_id, "items"), index)
        return None if raw is None else Triple.model_validate_json(raw)

    def find(self, batch_id: str, item_id: str) -> int | None:
        """Input index of the first item with this id (ids are the user's and may repeat). Scans the items list a
        page at a time: for items not graded yet, whose place a results index can't tell."""
        key, page = batch_key(batch_id, "items"), 1000
        needle = json.dumps(item_id, ensure_ascii=False)
        for start in range(0, int(self.redis.llen(key)), page):
            for offset, raw in enumerate(self.redis.lrange(key, start, start + page - 1)):
                if needle in text(raw) and Triple.model_validate_json(raw).id == item_id:
                    return start + offset
        return None
