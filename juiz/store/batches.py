"""Batches: their record (one hash), creation with their items and chunk jobs in one transaction, idempotency keys,
status changes, cancelling, the tenant's list of batches for the web page."""

from __future__ import annotations

import functools
import hashlib
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis import Redis
from redis.exceptions import WatchError

from juiz.runtime.errors import IdempotencyConflict
from juiz.runtime.settings import Settings
from juiz.store.cache import ResultCache
from juiz.store.chunks import ChunkRef, Chunks
from juiz.store.keys import (
    active_key,
    batch_key,
    idem_key,
    last_batch_key,
    pending_batches_key,
    pending_key,
    pending_tenants_key,
    queue_events_key,
    tenant_batches_key,
    text,
)
from juiz.store.metrics import Metrics
from juiz.store.progress import BatchProgress
from juiz.store.queues import ChunkJobs
from schemas import BatchCounts, BatchOptions, BatchStatus, Triple

TERMINAL = frozenset({BatchStatus.DONE, BatchStatus.FAILED, BatchStatus.CANCELLED})
COUNT_FIELDS = ("done", "ok", "parse_error", "failed")

# Once a batch is over, its keys expire after the retention period (ARGV: now, retention_s; 0 keeps them).
# KEYS (every batch script takes `script_keys`): batch, stored, results, items, jobs, chunkjobs, owner, uncertain,
# events.
RETAIN_LUA = """
local function retain(now, ttl)
  if tonumber(ttl) > 0 then
    for i = 1, 8 do redis.call('EXPIRE', KEYS[i], ttl) end
  end
end
"""

_MARK_RUNNING = """
if redis.call('HGET', KEYS[1], 'status') == 'queued' then
  redis.call('HSET', KEYS[1], 'status', 'running')
  redis.call('HSETNX', KEYS[1], 'started_at', ARGV[1])
  return 1
end
return 0
"""

_CANCEL = (
    RETAIN_LUA
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'queued' or status == 'running' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'cancelled_at', ARGV[1], 'finished_at', ARGV[1])
  retain(ARGV[1], ARGV[2])
  redis.call('XADD', KEYS[9], 'MAXLEN', '~', 64, '*', 'cancelled', 1)
  redis.call('EXPIRE', KEYS[9], 86400)
  return 1
end
return 0
"""
)


def script_keys(batch_id: str) -> list[str]:
    """The keys the batch scripts take, in their order (see RETAIN_LUA)."""
    parts = ("stored", "results", "items", "jobs", "chunkjobs", "owner", "uncertain", "events")
    return [batch_key(batch_id), *(batch_key(batch_id, part) for part in parts)]


@dataclass(frozen=True)
class BatchRecord:
    id: str
    tenant: str
    status: BatchStatus
    options: BatchOptions
    total: int
    chunk_size: int
    queue: str
    counts: BatchCounts
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    cancelled_at: float | None = None
    updated_at: float | None = None
    name: str | None = None  # the reader's name for it (the web page's upload: its file name); editable
    # Conversations planned and done in its engine calls (juiz.store.progress).
    progress: BatchProgress = field(default_factory=BatchProgress)

    @property
    def n_chunks(self) -> int:
        return math.ceil(self.total / self.chunk_size)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def chunk_range(self, chunk_no: int) -> range:
        start = chunk_no * self.chunk_size
        return range(start, min(start + self.chunk_size, self.total))


@functools.lru_cache(maxsize=1024)
def _options(raw: str) -> BatchOptions:
    # A batch's options never change; validating them (label mapping and all) was a third of a status poll's CPU.
    return BatchOptions.model_validate_json(raw)


def batch_from_hash(raw: Mapping[Any, Any]) -> BatchRecord | None:
    """A batch from its hash (HGETALL of batch:{id}), None for a missing one. Also used by the API's async reads."""
    if not raw:
        return None
    data = {text(k): text(v) for k, v in raw.items()}
    total = int(data["total"])

    def stamp(name: str) -> float | None:
        return float(data[name]) if data.get(name) else None

    return BatchRecord(
        id=data["id"],
        tenant=data["tenant"],
        status=BatchStatus(data["status"]),
        options=_options(data["options"]).model_copy(),
        total=total,
        chunk_size=int(data["chunk_size"]),
        queue=data["queue"],
        counts=BatchCounts(total=total, **{name: int(data.get(name, 0)) for name in COUNT_FIELDS}),
        created_at=float(data["created_at"]),
        started_at=stamp("started_at"),
        finished_at=stamp("finished_at"),
        cancelled_at=stamp("cancelled_at"),
        updated_at=stamp("updated_at"),
        name=data.get("name") or None,
        progress=BatchProgress.from_fields(data),
    )


class Batches:
    def __init__(
        self, redis: Redis, settings: Settings, chunks: Chunks, jobs: ChunkJobs, metrics: Metrics, cache: ResultCache
    ) -> None:
        self.redis = redis
        self.settings = settings
        self.chunks = chunks
        self.jobs = jobs
        self.metrics = metrics
        self.cache = cache
        self._mark_running = redis.register_script(_MARK_RUNNING)
        self._cancel = redis.register_script(_CANCEL)

    def create(
        self,
        tenant: str,
        options: BatchOptions,
        items: Sequence[Triple],
        *,
        priority: bool = False,
        idempotency_key: str | None = None,
        fingerprint: str = "",
        name: str | None = None,
    ) -> tuple[BatchRecord, bool]:
        """Store a batch, its items and its chunk jobs in one transaction. Returns (batch, created).

        With an idempotency key: the first request creates the batch; a repeat with the same fingerprint gets the
        same batch back (created=False); a repeat with another fingerprint raises IdempotencyConflict.
        """
        now = time.time()
        queue_name = self.settings.priority_queue if priority else self.settings.queue
        record = BatchRecord(
            id=uuid.uuid4().hex,
            tenant=tenant,
            status=BatchStatus.QUEUED,
            options=options,
            total=len(items),
            chunk_size=self.settings.chunk_size,
            queue=queue_name,
            counts=BatchCounts(total=len(items)),
            created_at=now,
            name=name or None,
        )
        if idempotency_key is None:
            with self.redis.pipeline(transaction=True) as pipe:
                self._write(record, items, pipe)
                pipe.execute()
        else:
            digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
            existing = self._create_once(idem_key(tenant, digest), fingerprint, record, items)
            if existing is not None:
                return existing, False
        self.metrics.count("batches_created")
        return record, True

    def _create_once(
        self, idem_key: str, fingerprint: str, record: BatchRecord, items: Sequence[Triple]
    ) -> BatchRecord | None:
        """Write the key and the batch in ONE transaction (WATCH/MULTI): a crash can't leave a key without its batch.

        Returns the batch the key already names (same fingerprint), or None once this request's batch is written.
        """
        while True:
            with self.redis.pipeline(transaction=True) as pipe:
                try:
                    pipe.watch(idem_key)
                    value = pipe.get(idem_key)
                    if value is not None:
                        batch_id, _, stored_fingerprint = text(value).partition(" ")
                        if stored_fingerprint != fingerprint:
                            raise IdempotencyConflict(batch_id)
                        existing = self.get(batch_id)
                        if existing is not None:
                            return existing
                        # its batch expired (retention shorter than the key's TTL): the key is stale, reuse it
                    pipe.multi()
                    pipe.set(idem_key, f"{record.id} {fingerprint}", ex=self.settings.idempotency_ttl_s)
                    self._write(record, items, pipe)
                    pipe.execute()
                    return None
                except WatchError:
                    continue  # another request with this key wrote first: read what it wrote

    def _write(self, record: BatchRecord, items: Sequence[Triple], pipe: Any) -> None:
        """Queue the batch's writes in `pipe` (a MULTI transaction the caller executes)."""
        pipe.hset(
            batch_key(record.id),
            mapping={
                "id": record.id,
                "tenant": record.tenant,
                "status": record.status.value,
                "options": record.options.model_dump_json(),
                "total": record.total,
                "chunk_size": record.chunk_size,
                "queue": record.queue,
                "created_at": repr(record.created_at),
                **dict.fromkeys(COUNT_FIELDS, 0),
                **({"name": record.name} if record.name else {}),
            },
        )
        items_key = batch_key(record.id, "items")
        for start in range(0, len(items), 1000):
            pipe.rpush(items_key, *(t.model_dump_json() for t in items[start : start + 1000]))
        pending = {ChunkRef(record.id, n).member: record.created_at + n * 1e-6 for n in range(record.n_chunks)}
        pipe.zadd(pending_key(record.queue), pending)
        pipe.zadd(pending_batches_key(record.queue, record.tenant), {record.id: record.created_at})
        pipe.zadd(pending_tenants_key(record.queue), {record.tenant: record.created_at}, nx=True)
        pipe.zadd(tenant_batches_key(record.tenant), {record.id: record.created_at})  # the web page's list
        pipe.zadd(active_key(), {record.id: record.created_at})  # the sweeper drops it once it is over
        pipe.xadd(queue_events_key(record.queue), {"batch": record.id}, maxlen=1000, approximate=True)
        # What a worker's burst wait reads (workers.jobs._settle): batches submitted together are shared as one backlog.
        pipe.set(last_batch_key(record.queue), repr(record.created_at))
        if self.settings.retention_s:
            # Indexes outlive their newest batch by twice the retention (a batch is kept that long after it ends);
            # entries of batches gone before are pruned as they are read, and by `juiz admin gc`.
            # Scheduling keys (a queue's pending and fairness indexes) get none: a pending chunk never loses its place.
            for key in (tenant_batches_key(record.tenant), active_key()):
                pipe.expire(key, 2 * self.settings.retention_s)
        self.jobs.enqueue(record.queue, [ChunkRef(record.id, n) for n in range(record.n_chunks)], pipe)

    def get(self, batch_id: str) -> BatchRecord | None:
        return batch_from_hash(self.redis.hgetall(batch_key(batch_id)))

    def mark_running(self, batch_id: str) -> None:
        self._mark_running(keys=[batch_key(batch_id)], args=[repr(time.time())])

    def cancel(self, batch: BatchRecord) -> BatchRecord:
        """Cancel a queued or running batch: drop its pending chunks and its queued jobs. Results stay."""
        if self._cancel(keys=script_keys(batch.id), args=[repr(time.time()), self.settings.retention_s]):
            self.chunks.drop_pending(batch.queue, (ChunkRef(batch.id, n) for n in range(batch.n_chunks)))
            self.jobs.drop_batch(batch.id, batch.queue)
        return self.get(batch.id) or batch

    def cancelled(self, batch_ids: Iterable[str]) -> set[str]:
        """Which of these batches are cancelled now (one round trip; polled during an engine call)."""
        ids = list(batch_ids)
        with self.redis.pipeline(transaction=False) as pipe:
            for batch_id in ids:
                pipe.hget(batch_key(batch_id), "status")
            statuses = pipe.execute()
        return {b for b, s in zip(ids, statuses, strict=True) if s is None or text(s) == BatchStatus.CANCELLED.value}

    def page(self, tenant: str, offset: int, limit: int) -> tuple[list[BatchRecord], int]:
        """One page of the tenant's batches, newest first, and how many the index holds. Batches whose keys have
        expired (retention) are dropped from the index as they are met."""
        key = tenant_batches_key(tenant)
        ids = [text(i) for i in self.redis.zrevrange(key, offset, offset + limit - 1)]
        records = [self.get(batch_id) for batch_id in ids]
        gone = [batch_id for batch_id, record in zip(ids, records, strict=True) if record is None]
        if gone:
            self.redis.zrem(key, *gone)
        return [r for r in records if r is not None], int(self.redis.zcard(key)) - len(gone)

    def set_name(self, batch_id: str, name: str) -> None:
        """Name (or, with "", unname) a batch: a field of its hash, so it expires with the batch."""
        if name:
            self.redis.hset(batch_key(batch_id), "name", name)
        else:
            self.redis.hdel(batch_key(batch_id), "name")

    def purge(self, batch: BatchRecord) -> int:
        """Erase a batch: cancel it if it runs, then delete every key of it (results, items, cached reports), its
        place in the indexes, and the cache entries its items read or wrote. Returns how many keys were deleted."""
        if not batch.terminal:
            self.cancel(batch)
        self.cache.forget(batch.id)
        # every key of the batch carries its hash tag; a glob reaches those named by others (service.agreement's)
        doomed = list(self.redis.scan_iter(match=batch_key(batch.id) + "*", count=1000))
        with self.redis.pipeline(transaction=False) as pipe:
            for key in doomed:
                pipe.delete(key)
            pipe.zrem(tenant_batches_key(batch.tenant), batch.id)
            pipe.zrem(active_key(), batch.id)
            pipe.zrem(pending_batches_key(batch.queue, batch.tenant), batch.id)
            pipe.execute()
        return len(doomed)
