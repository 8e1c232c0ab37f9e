"""The Redis data layer the API and the workers share: batches, items, results, leases, the result cache, metrics.

Keys (all under `juiz:`; a batch's keys share its id):

    batch:{id}            hash    tenant, status, options, total, chunk_size, queue, counts, timestamps
    batch:{id}:items      list    the items as Triple JSON, in input order (chunk n = a slice of it)
    batch:{id}:stored     hash    item index → 1, set with HSETNX: an item is stored exactly once
    batch:{id}:results    list    "index\\njudgement JSON", in completion order (cursor = offset into it)
    batch:{id}:jobs       set     the RQ job ids made for the batch, so a cancel can drop the queued ones
    pending:{queue}       zset    "batch:chunk" of chunks not yet complete, oldest first: what workers coalesce
    lease:{batch}:{chunk} string  the token of the worker grading that chunk now (SET NX EX lease_s)
    idem:{tenant}:{sha}   string  "batch_id fingerprint" for an Idempotency-Key
    cache:{sha}           string  a reusable result for (question, answer, prompt, prompt sha, model, sampling)
    metrics, hist:*, rate:*       counters and histograms /metrics reads at scrape time

Results are stored by one Lua script that checks the stored-marker, appends, counts and closes the batch in one
step, so a worker that re-runs a chunk (after a crash, or a lease that ran out) can never store an item twice.

RQ needs a connection that does not decode responses; this module decodes what it reads itself.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis import Redis
from rq import Callback, Queue, Retry
from rq.job import Job
from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

from juiz.settings import Settings
from schemas import BatchCounts, BatchOptions, BatchStatus, Judgement, Triple

log = logging.getLogger(__name__)

PREFIX = "juiz"
JOB_FUNCTION = "workers.jobs.grade_chunk"  # by name: the API never imports the worker side
FAILURE_CALLBACK = "workers.jobs.on_chunk_failure"
TERMINAL = frozenset({BatchStatus.DONE, BatchStatus.FAILED, BatchStatus.CANCELLED})
COUNT_FIELDS = ("done", "ok", "parse_error", "failed")

ENGINE_CALL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ITEM_BUCKETS = (0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
RATE_WINDOW_S = 60

# Once a batch is over, its keys expire after the retention period (ARGV: now, retention_s; 0 keeps them).
_RETAIN = """
local function retain(now, ttl)
  if tonumber(ttl) > 0 then
    for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6]}) do redis.call('EXPIRE', key, ttl) end
  end
end
"""

# KEYS: batch, stored, results, metrics, items, jobs. ARGV: now, retention_s, then (index, status, entry) triples.
# Returns the indices newly stored; -1 when the batch was cancelled, -2 when there is no such batch.
_STORE_RESULTS = (
    _RETAIN
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return -2 end
if status == 'cancelled' then return -1 end
local stored = {}
for i = 3, #ARGV, 3 do
  if redis.call('HSETNX', KEYS[2], ARGV[i], 1) == 1 then
    redis.call('RPUSH', KEYS[3], ARGV[i + 2])
    redis.call('HINCRBY', KEYS[1], ARGV[i + 1], 1)
    redis.call('HINCRBY', KEYS[4], 'items_' .. ARGV[i + 1], 1)
    stored[#stored + 1] = ARGV[i]
  end
end
if #stored == 0 then return stored end
local done = redis.call('HINCRBY', KEYS[1], 'done', #stored)
redis.call('HSET', KEYS[1], 'updated_at', ARGV[1])
if status == 'queued' then
  redis.call('HSET', KEYS[1], 'status', 'running')
  redis.call('HSETNX', KEYS[1], 'started_at', ARGV[1])
end
if done >= tonumber(redis.call('HGET', KEYS[1], 'total')) then
  local ok = tonumber(redis.call('HGET', KEYS[1], 'ok') or '0')
  local graded = ok + tonumber(redis.call('HGET', KEYS[1], 'parse_error') or '0')
  redis.call('HSET', KEYS[1], 'status', graded > 0 and 'done' or 'failed', 'finished_at', ARGV[1])
  retain(ARGV[1], ARGV[2])
end
return stored
"""
)

# Delete a lease only if it still holds our token (it may have expired and been taken by another worker).
_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
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
    _RETAIN
    + """
local status = redis.call('HGET', KEYS[1], 'status')
if status == 'queued' or status == 'running' then
  redis.call('HSET', KEYS[1], 'status', 'cancelled', 'cancelled_at', ARGV[1], 'finished_at', ARGV[1])
  retain(ARGV[1], ARGV[2])
  return 1
end
return 0
"""
)


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request body."""

    def __init__(self, batch_id: str) -> None:
        self.batch_id = batch_id
        super().__init__(f"Idempotency-Key already used for batch {batch_id} with a different request")


class ChunkRef(NamedTuple):
    batch_id: str
    chunk_no: int

    @property
    def member(self) -> str:
        return f"{self.batch_id}:{self.chunk_no}"

    @classmethod
    def parse(cls, member: str) -> ChunkRef:
        batch_id, _, chunk = member.rpartition(":")
        return cls(batch_id, int(chunk))


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

    @property
    def n_chunks(self) -> int:
        return math.ceil(self.total / self.chunk_size)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def chunk_range(self, chunk_no: int) -> range:
        start = chunk_no * self.chunk_size
        return range(start, min(start + self.chunk_size, self.total))


class Store:
    """Everything juiz keeps in Redis. Thread-safe as far as the Redis client is (redis-py's is)."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self._store_results = redis.register_script(_STORE_RESULTS)
        self._release_lease = redis.register_script(_RELEASE_LEASE)
        self._mark_running = redis.register_script(_MARK_RUNNING)
        self._cancel = redis.register_script(_CANCEL)

    # --- keys -------------------------------------------------------------------------------------------------

    @staticmethod
    def batch_key(batch_id: str, part: str | None = None) -> str:
        return f"{PREFIX}:batch:{batch_id}" + (f":{part}" if part else "")

    @staticmethod
    def pending_key(queue: str) -> str:
        return f"{PREFIX}:pending:{queue}"

    @staticmethod
    def lease_key(chunk: ChunkRef) -> str:
        return f"{PREFIX}:lease:{chunk.batch_id}:{chunk.chunk_no}"

    def _batch_keys(self, batch_id: str) -> list[str]:
        """The keys the Lua scripts take, in their order: batch, stored, results, metrics, items, jobs."""
        return [
            self.batch_key(batch_id),
            self.batch_key(batch_id, "stored"),
            self.batch_key(batch_id, "results"),
            f"{PREFIX}:metrics",
            self.batch_key(batch_id, "items"),
            self.batch_key(batch_id, "jobs"),
        ]

    # --- queues -----------------------------------------------------------------------------------------------

    def rq_queue(self, name: str) -> Queue:
        return Queue(
            name, connection=self.redis, serializer=JSONSerializer, default_timeout=self.settings.job_timeout_s
        )

    def _job_data(self, batch_id: str, chunk_no: int, queue: Queue) -> Any:
        intervals = self.settings.retry_intervals
        return queue.prepare_data(
            JOB_FUNCTION,
            args=(batch_id, chunk_no),
            job_id=f"{batch_id}-{chunk_no}-{uuid.uuid4().hex[:8]}",
            timeout=self.settings.job_timeout_s,
            result_ttl=0,
            failure_ttl=7 * 86400,
            retry=Retry(max=len(intervals), interval=intervals) if intervals else None,
            on_failure=Callback(FAILURE_CALLBACK),
            description=f"grade chunk {chunk_no} of batch {batch_id}",
        )

    def enqueue_chunk(self, batch: BatchRecord, chunk_no: int) -> str:
        """Put one more job for a chunk at the back of its queue (a job that found its chunk leased)."""
        queue = self.rq_queue(batch.queue)
        with self.redis.pipeline() as pipe:
            (job,) = queue.enqueue_many([self._job_data(batch.id, chunk_no, queue)], pipeline=pipe)
            pipe.sadd(self.batch_key(batch.id, "jobs"), job.id)
            pipe.execute()
        return str(job.id)

    # --- batches ----------------------------------------------------------------------------------------------

    def create_batch(
        self,
        tenant: str,
        options: BatchOptions,
        items: Sequence[Triple],
        *,
        priority: bool = False,
        idempotency_key: str | None = None,
        fingerprint: str = "",
    ) -> tuple[BatchRecord, bool]:
        """Store a batch, its items and its chunk jobs in one transaction. Returns (batch, created).

        With an idempotency key: the first request creates the batch; a repeat with the same fingerprint gets the
        same batch back (created=False); a repeat with another fingerprint raises IdempotencyConflict.
        """
        batch_id = uuid.uuid4().hex
        idem_key = None
        if idempotency_key is not None:
            digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
            idem_key = f"{PREFIX}:idem:{tenant}:{digest}"
            claimed = self.redis.set(idem_key, f"{batch_id} {fingerprint}", nx=True, ex=self.settings.idempotency_ttl_s)
            if not claimed:
                return self._replay(idem_key, fingerprint), False
        now = time.time()
        queue_name = self.settings.priority_queue if priority else self.settings.queue
        record = BatchRecord(
            id=batch_id,
            tenant=tenant,
            status=BatchStatus.QUEUED,
            options=options,
            total=len(items),
            chunk_size=self.settings.chunk_size,
            queue=queue_name,
            counts=BatchCounts(total=len(items)),
            created_at=now,
        )
        try:
            self._write_batch(record, items)
        except BaseException:
            if idem_key is not None:
                self.redis.delete(idem_key)
            raise
        self.redis.hincrby(f"{PREFIX}:metrics", "batches_created", 1)
        return record, True

    def _replay(self, idem_key: str, fingerprint: str) -> BatchRecord:
        for _ in range(50):  # the first request may still be writing its batch
            value = self.redis.get(idem_key)
            if value is None:
                break
            batch_id, _, stored_fingerprint = text(value).partition(" ")
            if stored_fingerprint != fingerprint:
                raise IdempotencyConflict(batch_id)
            record = self.get_batch(batch_id)
            if record is not None:
                return record
            time.sleep(0.1)
        raise IdempotencyConflict("(being created)")

    def _write_batch(self, record: BatchRecord, items: Sequence[Triple]) -> None:
        queue = self.rq_queue(record.queue)
        jobs = [self._job_data(record.id, n, queue) for n in range(record.n_chunks)]
        with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(
                self.batch_key(record.id),
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
                },
            )
            items_key = self.batch_key(record.id, "items")
            for start in range(0, len(items), 1000):
                pipe.rpush(items_key, *(t.model_dump_json() for t in items[start : start + 1000]))
            pending = {ChunkRef(record.id, n).member: record.created_at + n * 1e-6 for n in range(record.n_chunks)}
            pipe.zadd(self.pending_key(record.queue), pending)
            pipe.sadd(self.batch_key(record.id, "jobs"), *(job.job_id for job in jobs))
            queue.enqueue_many(jobs, pipeline=pipe)
            pipe.execute()

    def get_batch(self, batch_id: str) -> BatchRecord | None:
        return batch_from_hash(self.redis.hgetall(self.batch_key(batch_id)))

    def mark_running(self, batch_id: str) -> None:
        self._mark_running(keys=[self.batch_key(batch_id)], args=[repr(time.time())])

    def cancel_batch(self, batch: BatchRecord) -> BatchRecord:
        """Cancel a queued or running batch: drop its pending chunks and its queued jobs. Results stay."""
        if self._cancel(keys=self._batch_keys(batch.id), args=[repr(time.time()), self.settings.retention_s]):
            self.redis.zrem(
                self.pending_key(batch.queue), *(ChunkRef(batch.id, n).member for n in range(batch.n_chunks))
            )
            self._drop_queued_jobs(batch)
        return self.get_batch(batch.id) or batch

    def _drop_queued_jobs(self, batch: BatchRecord) -> None:
        job_ids = [text(j) for j in self.redis.smembers(self.batch_key(batch.id, "jobs"))]
        queue = self.rq_queue(batch.queue)
        scheduled = ScheduledJobRegistry(queue=queue)
        with self.redis.pipeline() as pipe:
            for job_id in job_ids:
                queue.remove(job_id, pipeline=pipe)
                scheduled.remove(job_id, pipeline=pipe)
                pipe.delete(Job.key_for(job_id))
            pipe.execute()

    # --- chunks and leases ------------------------------------------------------------------------------------

    def chunk_items(self, batch: BatchRecord, chunk_no: int) -> list[tuple[int, Triple]]:
        """The chunk's items that have no stored result yet, with their index in the batch."""
        indices = batch.chunk_range(chunk_no)
        if not indices:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.lrange(self.batch_key(batch.id, "items"), indices.start, indices.stop - 1)
            pipe.hmget(self.batch_key(batch.id, "stored"), list(indices))
            raw_items, stored = pipe.execute()
        return [
            (index, Triple.model_validate_json(raw))
            for index, raw, done in zip(indices, raw_items, stored, strict=True)
            if done is None
        ]

    def pending_chunks(self, queue: str, limit: int) -> list[ChunkRef]:
        return [ChunkRef.parse(text(m)) for m in self.redis.zrange(self.pending_key(queue), 0, limit - 1)]

    def drop_pending(self, queue: str, chunks: Iterable[ChunkRef]) -> None:
        members = [c.member for c in chunks]
        if members:
            self.redis.zrem(self.pending_key(queue), *members)

    def take_lease(self, chunk: ChunkRef, token: str) -> bool:
        return bool(self.redis.set(self.lease_key(chunk), token, nx=True, ex=self.settings.lease_s))

    def release_lease(self, chunk: ChunkRef, token: str) -> None:
        self._release_lease(keys=[self.lease_key(chunk)], args=[token])

    # --- results ----------------------------------------------------------------------------------------------

    def store_results(self, batch: BatchRecord, results: Sequence[tuple[int, Judgement]]) -> list[int]:
        """Store results not stored before; returns the indices stored now (none when the batch was cancelled)."""
        if not results:
            return []
        now = time.time()
        args: list[str | int] = [repr(now), self.settings.retention_s]
        for index, judgement in results:
            args += [str(index), judgement.status.value, f"{index}\n{judgement.model_dump_json()}"]
        outcome = self._store_results(keys=self._batch_keys(batch.id), args=args)
        if not isinstance(outcome, list):
            return []
        stored = [int(i) for i in outcome]
        if stored:
            self._observe_items(now - batch.created_at, len(stored), now)
        return stored

    def result_count(self, batch_id: str) -> int:
        return int(self.redis.llen(self.batch_key(batch_id, "results")))

    def read_results_raw(self, batch_id: str, offset: int, limit: int) -> list[str]:
        """Judgement JSON strings in completion order, from `offset`: the cursor of the results endpoint."""
        if limit <= 0:
            return []
        entries = self.redis.lrange(self.batch_key(batch_id, "results"), offset, offset + limit - 1)
        return [text(entry).partition("\n")[2] for entry in entries]

    def read_results(self, batch_id: str, offset: int, limit: int) -> list[Judgement]:
        return [Judgement.model_validate_json(raw) for raw in self.read_results_raw(batch_id, offset, limit)]

    def results_in_input_order(self, batch_id: str) -> list[Judgement]:
        """Every stored result, ordered as the items were submitted (for reports and agreement)."""
        entries = self.redis.lrange(self.batch_key(batch_id, "results"), 0, -1)
        indexed = []
        for entry in entries:
            index, _, raw = text(entry).partition("\n")
            indexed.append((int(index), raw))
        indexed.sort(key=lambda pair: pair[0])
        return [Judgement.model_validate_json(raw) for _, raw in indexed]

    # --- result cache -----------------------------------------------------------------------------------------

    def cache_get(self, keys: Sequence[str]) -> list[dict[str, Any] | None]:
        if not keys:
            return []
        values = self.redis.mget([f"{PREFIX}:cache:{k}" for k in keys])
        return [None if v is None else json.loads(v) for v in values]

    def cache_put(self, entries: dict[str, dict[str, Any]]) -> None:
        if not entries:
            return
        with self.redis.pipeline(transaction=False) as pipe:
            for key, value in entries.items():
                pipe.set(
                    f"{PREFIX}:cache:{key}", json.dumps(value, ensure_ascii=False), ex=self.settings.result_cache_ttl_s
                )
            pipe.execute()

    # --- metrics ----------------------------------------------------------------------------------------------

    def record_engine_call(self, seconds: float, items: int) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            _observe(pipe, "engine_call_seconds", ENGINE_CALL_BUCKETS, seconds, 1)
            pipe.hincrby(f"{PREFIX}:metrics", "engine_calls", 1)
            pipe.hincrby(f"{PREFIX}:metrics", "engine_items", items)
            pipe.execute()

    def record_cache_hits(self, hits: int) -> None:
        if hits:
            self.redis.hincrby(f"{PREFIX}:metrics", "cache_hits", hits)

    def _observe_items(self, seconds: float, count: int, now: float) -> None:
        rate_key = f"{PREFIX}:rate:{int(now)}"
        with self.redis.pipeline(transaction=False) as pipe:
            _observe(pipe, "item_seconds", ITEM_BUCKETS, seconds, count)
            pipe.incrby(rate_key, count)
            pipe.expire(rate_key, RATE_WINDOW_S * 2)
            pipe.execute()

    def counters(self) -> dict[str, int]:
        return {text(k): int(v) for k, v in self.redis.hgetall(f"{PREFIX}:metrics").items()}

    def histogram(self, name: str, buckets: Sequence[float]) -> tuple[list[tuple[str, int]], float, int]:
        """Cumulative (le, count) pairs ending with +Inf, the sum and the count, as Prometheus wants them."""
        raw = {text(k): v for k, v in self.redis.hgetall(f"{PREFIX}:hist:{name}").items()}
        cumulative, running = [], 0
        for bound in (*buckets, math.inf):
            label = "+Inf" if bound == math.inf else repr(float(bound))
            running += int(raw.get(label, 0))
            cumulative.append((label, running))
        return cumulative, float(raw.get("sum", 0)), int(raw.get("count", 0))

    def judgements_per_second(self) -> float:
        """Items stored per second over the last minute, all workers together."""
        now = int(time.time())
        values = self.redis.mget([f"{PREFIX}:rate:{second}" for second in range(now - RATE_WINDOW_S + 1, now + 1)])
        return sum(int(v) for v in values if v is not None) / RATE_WINDOW_S

    def pending_chunk_count(self, queue: str) -> int:
        return int(self.redis.zcard(self.pending_key(queue)))


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
        options=BatchOptions.model_validate_json(data["options"]),
        total=total,
        chunk_size=int(data["chunk_size"]),
        queue=data["queue"],
        counts=BatchCounts(total=total, **{name: int(data.get(name, 0)) for name in COUNT_FIELDS}),
        created_at=float(data["created_at"]),
        started_at=stamp("started_at"),
        finished_at=stamp("finished_at"),
        cancelled_at=stamp("cancelled_at"),
        updated_at=stamp("updated_at"),
    )


def text(value: Any) -> str:
    """A Redis reply as text (RQ's connection returns bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _observe(pipe: Any, name: str, buckets: Sequence[float], value: float, count: int) -> None:
    key = f"{PREFIX}:hist:{name}"
    bound = next((b for b in buckets if value <= b), math.inf)
    pipe.hincrby(key, "+Inf" if bound == math.inf else repr(float(bound)), count)
    pipe.hincrbyfloat(key, "sum", value * count)
    pipe.hincrby(key, "count", count)
