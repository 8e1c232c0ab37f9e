"""The Redis data layer the API and the workers share: batches, items, results, chunk owners, the result cache, metrics.

Keys (all under `juiz:`; a batch's keys share its id):

    batch:{id}            hash    tenant, status, options, total, chunk_size, queue, counts, timestamps, name
    batch:{id}:items      list    the items as Triple JSON, in input order (chunk n = a slice of it)
    batch:{id}:stored     hash    item index → 1, set with HSETNX: an item is stored exactly once
    batch:{id}:results    list    "index\\njudgement JSON", in completion order (cursor = offset into it)
    batch:{id}:jobs       set     the RQ job ids made for the batch, so a cancel can drop the queued ones
    batch:{id}:chunkjobs  hash    chunk no → the id of the RQ job queued for it (what a coalescing job takes out)
    batch:{id}:owner      hash    chunk no → the id of the RQ job grading it now (its one owner)
    batch:{id}:abandoned  hash    chunk no → how many workers died grading it (more than MAX_ABANDONED: failed)
    batch:{id}:events     stream  one entry per results write or cancel: what /v1/grade and followers block on
    events:{queue}        stream  one entry per batch submitted or chunks given back: what a gathering job blocks on
    last-batch:{queue}    string  when the newest batch of the queue was created (a worker waits for a burst to end)
    pending:{queue}       zset    "batch:chunk" of chunks nobody is grading yet, oldest first: what workers coalesce
    pending-tenants:{queue}        zset  tenants with pending chunks (by their oldest batch): claim's round-robin
    pending-batches:{queue}:{t}    zset  tenant t's batches with pending chunks, oldest first (pruned by claim)
    owned:{job id}        set     "batch:chunk" of the chunks a job took from other jobs (given back if it dies)
    grading:{worker key}  string  the job a worker is grading (TTL renewed by its heartbeat): busy workers
    idem:{tenant}:{sha}   string  "batch_id fingerprint" for an Idempotency-Key
    tenant:{t}:batches    zset    the tenant's batch ids by creation time (the web page's list, newest first)
    active                zset    ids of batches not known to be over, by creation time (what juiz.sweeper checks)
    cache:{sha}           string  a reusable result for (question, answer, prompt, prompt sha, model, sampling)
    metrics, hist:*, rate:*       counters and histograms /metrics reads at scrape time

Results are stored by one Lua script that checks the stored-marker, appends, counts and closes the batch in one
step, so a worker that re-runs a chunk (after a crash, or a Redis outage) can never store an item twice.

Every chunk has ONE owner at a time: the RQ job that claimed it (`claim`, one Lua script). A job claims its own chunk
and, to fill its engine call, other pending chunks (`pending` is the truth: a chunk leaves it when a job claims it,
in the same script). The claimed chunks' own RQ jobs are then taken off their queue through RQ's API; one dequeued
meanwhile runs, finds its chunk owned and stops. RQ's keys are never written by these scripts. A job that can't
finish (transient fault, dead engine, killed worker) gives the chunks it took back (`release`): back in `pending`,
with a fresh RQ job each; its own chunk stays its own while RQ's retry waits out its backoff.

These scripts name keys they build themselves (batch hashes): fine on one Redis, not on Redis Cluster.

RQ needs a connection that does not decode responses; this module decodes what it reads itself.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from redis import Redis
from redis.exceptions import WatchError
from rq import Callback, Queue, Retry
from rq.job import Job
from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

from juiz.errors import IdempotencyConflict
from juiz.settings import Settings
from schemas import BatchCounts, BatchOptions, BatchStatus, Judgement, Triple
from schemas.triple import Label

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
    for _, key in ipairs({KEYS[1], KEYS[2], KEYS[3], KEYS[5], KEYS[6], KEYS[7], KEYS[8]}) do
      redis.call('EXPIRE', key, ttl)
    end
  end
end
"""

# KEYS: batch, stored, results, metrics, items, jobs, chunkjobs, owner, events.
# ARGV: now, retention_s, then (index, status, entry) triples.
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
-- progress event: /v1/grade and NDJSON followers block on this stream instead of polling
redis.call('XADD', KEYS[9], 'MAXLEN', '~', 64, '*', 'stored', #stored)
redis.call('EXPIRE', KEYS[9], 86400)
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

_TERMINAL_LUA = """
local function terminal(status) return status == 'done' or status == 'failed' or status == 'cancelled' end
local function split(member)
  local id, no = string.match(member, '^(.*):(%d+)$')
  return id, no
end
"""

# A job claims its own chunk and, to fill its engine call, other pending chunks whose RQ jobs are still queued.
# KEYS: pending zset, RQ queue list, RQ workers-of-this-queue set, this job's owned set, pending-tenants zset.
# ARGV: own member ('' when only coalescing), job id, budget in items (-1: the fair share), coalesce_max_items,
#       chunk_size, how many pending chunks to look at, worker key, busy-marker TTL, owned-set TTL, key prefix,
#       RQ job key prefix, items the job holds already (for the fair share when gathering more), queue name.
# Returns {0} when the own chunk is not this job's to grade, else {1, share, {claimed member, ...}, {their RQ jobs}}.
# RQ's keys are never touched here: the jobs of claimed chunks are taken off their queue by Store.claim (RQ's API).
_CLAIM = (
    _TERMINAL_LUA
    + """
local P, job_id = ARGV[10], ARGV[2]
local function bkey(id, part) return P .. ':batch:' .. id .. (part and (':' .. part) or '') end
local function size(total, cs, no) return math.min(cs, total - tonumber(no) * cs) end
local own_items = 0
if ARGV[1] ~= '' then
  local id, no = split(ARGV[1])
  -- pending → nobody holds it; already ours → a re-run of this very job (its worker died before giving it back)
  if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 and redis.call('HGET', bkey(id, 'owner'), no) ~= job_id then
    return {0}
  end
  redis.call('HSET', bkey(id, 'owner'), no, job_id)
  local b = redis.call('HMGET', bkey(id), 'total', 'chunk_size')
  if b[1] then own_items = size(tonumber(b[1]), tonumber(b[2]), no) end
end
local budget = tonumber(ARGV[3])
local share = budget
if budget < 0 then
  -- fair share: what is waiting, split between the workers not grading right now (this one included)
  local free = 1
  for _, w in ipairs(redis.call('SMEMBERS', KEYS[3])) do
    if w ~= ARGV[7] and redis.call('EXISTS', w) == 1 and redis.call('EXISTS', P .. ':grading:' .. w) == 0 then
      free = free + 1
    end
  end
  local have = own_items + tonumber(ARGV[12])
  local waiting = have + redis.call('ZCARD', KEYS[1]) * tonumber(ARGV[5])
  share = math.min(tonumber(ARGV[4]), math.ceil(waiting / free))
  budget = share - have
end
local claimed, superseded = {}, {}
if budget > 0 then
  -- Candidates, grouped by tenant and taken round-robin, so one tenant's backlog can't fill every call however deep
  -- it is: each tenant's oldest batches with pending chunks (pending-tenants / pending-batches, kept by create and
  -- release, pruned here), then the oldest pending chunks of all (which also covers chunks queued before the index).
  local batches, tenants, order, seen = {}, {}, {}, {}
  local scan = tonumber(ARGV[6])
  local function batch_of(id)
    local b = batches[id]
    if b == nil then
      local h = redis.call('HMGET', bkey(id), 'status', 'total', 'chunk_size', 'tenant', 'created_at')
      if not h[1] or terminal(h[1]) then b = false
      else b = {total = tonumber(h[2]), cs = tonumber(h[3]), tenant = h[4], created = tonumber(h[5])} end
      batches[id] = b
    end
    return b
  end
  local function add(m, id, no, b)
    if m == ARGV[1] or seen[m] then return end
    seen[m] = true
    local list = tenants[b.tenant]
    if list == nil then list = {}; tenants[b.tenant] = list; order[#order + 1] = b.tenant end
    list[#list + 1] = {m, id, no, size(b.total, b.cs, no)}
  end
  local tb_prefix = P .. ':pending-batches:' .. ARGV[13] .. ':'
  for _, tenant in ipairs(redis.call('ZRANGE', KEYS[5], 0, -1)) do
    local tb = tb_prefix .. tenant
    for _, id in ipairs(redis.call('ZRANGE', tb, 0, 3)) do
      local b = batch_of(id)
      local found = false
      if b then
        -- a batch's chunks are scored created_at + n * 1e-6: its pending ones are in that window
        local hi = b.created + math.ceil(b.total / b.cs) * 1e-6 + 1e-3
        local window = redis.call('ZRANGEBYSCORE', KEYS[1], b.created - 1e-3, hi, 'LIMIT', 0, scan)
        for _, m in ipairs(window) do
          local mid, no = split(m)
          if mid == id then found = true; add(m, id, no, b) end
        end
        if #window >= scan then found = true end  -- window full of another batch's chunks: not known to be empty
      end
      if not found then redis.call('ZREM', tb, id) end
    end
    if redis.call('EXISTS', tb) == 0 then redis.call('ZREM', KEYS[5], tenant) end
  end
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, scan - 1)) do
    local id, no = split(m)
    local b = batch_of(id)
    if b == false then redis.call('ZREM', KEYS[1], m) else add(m, id, no, b) end
  end
  local next_of, progress, served = {}, true, {}
  while budget > 0 and progress do
    progress = false
    for _, tenant in ipairs(order) do
      local list, i = tenants[tenant], next_of[tenant] or 1
      while i <= #list do
        local c = list[i]
        i = i + 1
        if c[4] <= budget then
          -- Pending: no job has claimed it (a job claims its own chunk in this same script), so it is ours now.
          -- Its own RQ job, if it runs anyway, finds the chunk owned and stops; Store.claim takes it off the queue.
          local job = redis.call('HGET', bkey(c[2], 'chunkjobs'), c[3])
          redis.call('ZREM', KEYS[1], c[1])
          redis.call('HSET', bkey(c[2], 'owner'), c[3], job_id)
          redis.call('SADD', KEYS[4], c[1])
          if job then
            redis.call('HDEL', bkey(c[2], 'chunkjobs'), c[3])
            redis.call('SREM', bkey(c[2], 'jobs'), job)
            superseded[#superseded + 1] = job
          end
          budget = budget - c[4]
          claimed[#claimed + 1] = c[1]
          served[#served + 1] = tenant
          progress = true
          break
        end
      end
      next_of[tenant] = i
      if budget <= 0 then break end
    end
  end
  -- tenants served now go to the back of the round-robin: the next call starts with those that waited longest
  local t = redis.call('TIME')
  local now = tonumber(t[1]) + tonumber(t[2]) * 1e-6
  for _, tenant in ipairs(served) do redis.call('ZADD', KEYS[5], 'XX', now, tenant) end
end
redis.call('SET', P .. ':grading:' .. ARGV[7], job_id, 'EX', ARGV[8])
if #claimed > 0 then redis.call('EXPIRE', KEYS[4], ARGV[9]) end
return {1, share, claimed, superseded}
"""
)

# Give chunks back: those this job still owns go back to `pending` (at their old place) unless their batch is over.
# KEYS: pending zset, this job's owned set. ARGV: job id, key prefix, members. Returns the members given back.
_RELEASE = (
    _TERMINAL_LUA
    + """
local P, job_id = ARGV[2], ARGV[1]
local released = {}
for i = 3, #ARGV do
  local m = ARGV[i]
  local id, no = split(m)
  local owner_key = P .. ':batch:' .. id .. ':owner'
  local owner = redis.call('HGET', owner_key, no)
  if owner == job_id or not owner then
    redis.call('HDEL', owner_key, no)
    local b = redis.call('HMGET', P .. ':batch:' .. id, 'status', 'created_at', 'tenant', 'queue')
    if b[1] and not terminal(b[1]) then
      redis.call('ZADD', KEYS[1], tonumber(b[2]) + tonumber(no) * 1e-6, m)
      -- the fairness index claim reads (see _CLAIM)
      redis.call('ZADD', P .. ':pending-batches:' .. b[4] .. ':' .. b[3], 'NX', b[2], id)
      redis.call('ZADD', P .. ':pending-tenants:' .. b[4], 'NX', b[2], b[3])
      released[#released + 1] = m
    end
  end
  redis.call('SREM', KEYS[2], m)
end
return released
"""
)

# A job is done with its chunks: drop its ownership, its owned set and its busy marker.
# KEYS: owned set, busy marker. ARGV: job id, key prefix, members.
_FINISH = (
    _TERMINAL_LUA
    + """
for i = 3, #ARGV do
  local id, no = split(ARGV[i])
  local owner_key = ARGV[2] .. ':batch:' .. id .. ':owner'
  if redis.call('HGET', owner_key, no) == ARGV[1] then redis.call('HDEL', owner_key, no) end
end
redis.call('DEL', KEYS[1])
if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
return 1
"""
)

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
  redis.call('XADD', KEYS[9], 'MAXLEN', '~', 64, '*', 'cancelled', 1)
  redis.call('EXPIRE', KEYS[9], 86400)
  return 1
end
return 0
"""
)


# A manual-label change: replace one results entry if it is still what the caller read, and bump labels_version.
# KEYS: batch, results. ARGV: position, entry read, new entry. Returns the new labels_version (≥ 1) when replaced,
# 0 when the entry had changed.
_SET_LABEL = """
if redis.call('LINDEX', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('LSET', KEYS[2], ARGV[1], ARGV[3])
return redis.call('HINCRBY', KEYS[1], 'labels_version', 1)
"""


class JuizQueue(Queue):
    """RQ's Queue with a maintenance lock that lasts a minute, not RQ's 899 s: a worker killed while running
    maintenance (busy workers run it from their heartbeat thread) must not stop everyone's for 15 minutes, which
    would hold up the recovery of killed workers' chunks."""

    MAINTENANCE_LOCK_S = 60

    def acquire_maintenance_lock(self) -> bool:
        return bool(self.connection.set(self.registry_cleaning_key, 1, nx=True, ex=self.MAINTENANCE_LOCK_S))


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
class Claim:
    """What a job may grade: the chunks it took from other jobs (its own is implied) and its fair share of items."""

    share: int
    chunks: list[ChunkRef]


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
        self._claim = redis.register_script(_CLAIM)
        self._release = redis.register_script(_RELEASE)
        self._finish = redis.register_script(_FINISH)
        self._mark_running = redis.register_script(_MARK_RUNNING)
        self._cancel = redis.register_script(_CANCEL)
        self._set_label = redis.register_script(_SET_LABEL)

    # --- keys -------------------------------------------------------------------------------------------------

    @staticmethod
    def batch_key(batch_id: str, part: str | None = None) -> str:
        return f"{PREFIX}:batch:{batch_id}" + (f":{part}" if part else "")

    @staticmethod
    def pending_key(queue: str) -> str:
        return f"{PREFIX}:pending:{queue}"

    @staticmethod
    def last_batch_key(queue: str) -> str:
        return f"{PREFIX}:last-batch:{queue}"

    @staticmethod
    def pending_tenants_key(queue: str) -> str:
        return f"{PREFIX}:pending-tenants:{queue}"

    @staticmethod
    def pending_batches_key(queue: str, tenant: str) -> str:
        return f"{PREFIX}:pending-batches:{queue}:{tenant}"

    @staticmethod
    def queue_events_key(queue: str) -> str:
        return f"{PREFIX}:events:{queue}"

    @staticmethod
    def active_key() -> str:
        return f"{PREFIX}:active"

    @staticmethod
    def owned_key(job_id: str) -> str:
        return f"{PREFIX}:owned:{job_id}"

    @staticmethod
    def grading_key(worker_key: str) -> str:
        return f"{PREFIX}:grading:{worker_key}"

    def _batch_keys(self, batch_id: str) -> list[str]:
        """The keys the Lua scripts take, in their order: batch, stored, results, metrics, items, jobs, chunkjobs,
        owner, events."""
        return [
            self.batch_key(batch_id),
            self.batch_key(batch_id, "stored"),
            self.batch_key(batch_id, "results"),
            f"{PREFIX}:metrics",
            self.batch_key(batch_id, "items"),
            self.batch_key(batch_id, "jobs"),
            self.batch_key(batch_id, "chunkjobs"),
            self.batch_key(batch_id, "owner"),
            self.batch_key(batch_id, "events"),
        ]

    # --- queues -----------------------------------------------------------------------------------------------

    def rq_queue(self, name: str) -> Queue:
        return JuizQueue(
            name, connection=self.redis, serializer=JSONSerializer, default_timeout=self.settings.job_timeout_s
        )

    def count_abandoned(self, chunks: Sequence[ChunkRef]) -> list[int]:
        """One more death of a worker while grading each chunk; returns the counts (a chunk that kills every worker
        that grades it must end, not go round for ever)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for chunk in chunks:
                key = self.batch_key(chunk.batch_id, "abandoned")
                pipe.hincrby(key, str(chunk.chunk_no), 1)
                pipe.expire(key, self.settings.retention_s or 30 * 86400)
            replies = pipe.execute()
        return [int(n) for n in replies[0::2]]

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

    def _enqueue_chunks(self, queue_name: str, chunks: Sequence[ChunkRef], pipe: Any) -> None:
        """Queue one RQ job per chunk (in `pipe`), remembering which job is each chunk's, for `claim`."""
        queue = self.rq_queue(queue_name)
        jobs = [self._job_data(c.batch_id, c.chunk_no, queue) for c in chunks]
        for chunk, job in zip(chunks, jobs, strict=True):
            pipe.hset(self.batch_key(chunk.batch_id, "chunkjobs"), str(chunk.chunk_no), job.job_id)
            pipe.sadd(self.batch_key(chunk.batch_id, "jobs"), job.job_id)
        queue.enqueue_many(jobs, pipeline=pipe)

    # --- chunk ownership --------------------------------------------------------------------------------------

    def claim(
        self,
        queue: str,
        job_id: str,
        worker_key: str,
        *,
        own: ChunkRef | None,
        budget: int | None = None,
        have: int = 0,
    ) -> Claim | None:
        """Claim `own` (the job's own chunk) and other pending chunks of `queue` up to the fair share of items.

        `budget=None`: the fair share, min(coalesce_max_items, ceil(waiting items / workers not grading)), so one
        large batch is split between the idle workers and a backlog fills every call. Returns None when `own` is not
        this job's to grade (done, cancelled, or given to a newer job after this one was taken as dead). `have`: items
        the job holds already (a second claim while gathering), counted in the share.
        """
        settings = self.settings
        scan = max(16, 4 * settings.coalesce_max_items // max(1, settings.chunk_size) + 16)
        reply = self._claim(
            keys=[
                self.pending_key(queue),
                self.rq_queue(queue).key,
                f"rq:workers:{queue}",
                self.owned_key(job_id),
                self.pending_tenants_key(queue),
            ],
            args=[
                own.member if own is not None else "",
                job_id,
                -1 if budget is None else budget,
                settings.coalesce_max_items,
                settings.chunk_size,
                scan,
                worker_key,
                settings.heartbeat_ttl_s,
                settings.job_timeout_s + 3600,
                PREFIX,
                Job.redis_job_namespace_prefix,
                have,
                queue,
            ],
        )
        if not reply or int(reply[0]) == 0:
            return None
        superseded = [text(j) for j in reply[3]]
        if superseded:
            self._drop_jobs(queue, superseded)
        return Claim(share=int(reply[1]), chunks=[ChunkRef.parse(text(m)) for m in reply[2]])

    def _drop_jobs(self, queue_name: str, job_ids: Sequence[str]) -> None:
        """Take jobs whose chunks another job claimed off their queue and delete them, through RQ's API. Tidiness,
        not correctness: a job dequeued meanwhile runs, finds its chunk owned, and stops."""
        queue = self.rq_queue(queue_name)
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                queue.remove(job_id, pipeline=pipe)
            removed = pipe.execute()
        gone = [job_id for job_id, n in zip(job_ids, removed, strict=True) if n]
        jobs = [job for job in Job.fetch_many(gone, connection=self.redis, serializer=JSONSerializer) if job]
        if jobs:
            with self.redis.pipeline(transaction=False) as pipe:
                for job in jobs:
                    job.delete(pipeline=pipe, remove_from_queue=False)
                pipe.execute()

    def chunk_events_cursor(self, queue: str) -> str:
        """The id of the queue's newest chunk event (a batch submitted, chunks given back); '0-0' if none."""
        newest = self.redis.xrevrange(self.queue_events_key(queue), count=1)
        return text(newest[0][0]) if newest else "0-0"

    def wait_for_chunks(self, queue: str, cursor: str, timeout_s: float) -> str:
        """Block until a chunk event newer than `cursor` (or `timeout_s`); returns the newest id seen."""
        block_ms = max(1, int(timeout_s * 1000))
        reply: Any = self.redis.xread({self.queue_events_key(queue): cursor}, count=1000, block=block_ms)
        return text(reply[0][1][-1][0]) if reply else cursor

    def last_batch_at(self, queue: str) -> float:
        """When the newest batch of `queue` was created (0 if none)."""
        value = self.redis.get(self.last_batch_key(queue))
        return float(text(value)) if value is not None else 0.0

    def owned(self, job_id: str) -> list[ChunkRef]:
        """The chunks a job took from other jobs and has not finished (left behind when its worker died)."""
        return [ChunkRef.parse(text(m)) for m in self.redis.smembers(self.owned_key(job_id))]

    def release(self, queue: str, job_id: str, chunks: Sequence[ChunkRef], *, requeue: bool = True) -> list[ChunkRef]:
        """Give chunks back: to `pending` and, with `requeue`, each with a fresh RQ job. Returns those given back.

        `requeue=False` is for a job's own chunk when RQ itself will run that job again (a retry).
        """
        if not chunks:
            return []
        released = self._release(
            keys=[self.pending_key(queue), self.owned_key(job_id)], args=[job_id, PREFIX, *(c.member for c in chunks)]
        )
        back = [ChunkRef.parse(text(m)) for m in released]
        if back and requeue:
            with self.redis.pipeline(transaction=True) as pipe:
                self._enqueue_chunks(queue, back, pipe)
                pipe.xadd(self.queue_events_key(queue), {"released": len(back)}, maxlen=1000, approximate=True)
                pipe.execute()
        return back

    def finish(self, job_id: str, worker_key: str, chunks: Sequence[ChunkRef]) -> None:
        """The job is done with its chunks (stored, or nothing left to do)."""
        self._finish(
            keys=[self.owned_key(job_id), self.grading_key(worker_key)],
            args=[job_id, PREFIX, *(c.member for c in chunks)],
        )

    def still_grading(self, worker_key: str, ttl_s: int) -> None:
        """Heartbeat of a busy worker: keep it out of the idle count that fair shares are computed from."""
        self.redis.expire(self.grading_key(worker_key), ttl_s)

    def cancelled_batches(self, batch_ids: Iterable[str]) -> set[str]:
        """Which of these batches are cancelled now (one round trip; polled during an engine call)."""
        ids = list(batch_ids)
        with self.redis.pipeline(transaction=False) as pipe:
            for batch_id in ids:
                pipe.hget(self.batch_key(batch_id), "status")
            statuses = pipe.execute()
        return {b for b, s in zip(ids, statuses, strict=True) if s is None or text(s) == BatchStatus.CANCELLED.value}

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
                self._write_batch(record, items, pipe)
                pipe.execute()
        else:
            digest = hashlib.sha256(idempotency_key.encode()).hexdigest()
            existing = self._create_once(f"{PREFIX}:idem:{tenant}:{digest}", fingerprint, record, items)
            if existing is not None:
                return existing, False
        self.redis.hincrby(f"{PREFIX}:metrics", "batches_created", 1)
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
                        existing = self.get_batch(batch_id)
                        if existing is not None:
                            return existing
                        # its batch expired (retention shorter than the key's TTL): the key is stale, reuse it
                    pipe.multi()
                    pipe.set(idem_key, f"{record.id} {fingerprint}", ex=self.settings.idempotency_ttl_s)
                    self._write_batch(record, items, pipe)
                    pipe.execute()
                    return None
                except WatchError:
                    continue  # another request with this key wrote first: read what it wrote

    def _write_batch(self, record: BatchRecord, items: Sequence[Triple], pipe: Any) -> None:
        """Queue the batch's writes in `pipe` (a MULTI transaction the caller executes)."""
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
                **({"name": record.name} if record.name else {}),
            },
        )
        items_key = self.batch_key(record.id, "items")
        for start in range(0, len(items), 1000):
            pipe.rpush(items_key, *(t.model_dump_json() for t in items[start : start + 1000]))
        pending = {ChunkRef(record.id, n).member: record.created_at + n * 1e-6 for n in range(record.n_chunks)}
        pipe.zadd(self.pending_key(record.queue), pending)
        pipe.zadd(self.pending_batches_key(record.queue, record.tenant), {record.id: record.created_at})
        pipe.zadd(self.pending_tenants_key(record.queue), {record.tenant: record.created_at}, nx=True)
        pipe.zadd(self.tenant_batches_key(record.tenant), {record.id: record.created_at})  # the web page's list
        pipe.zadd(self.active_key(), {record.id: record.created_at})  # the sweeper drops it once it is over
        pipe.xadd(self.queue_events_key(record.queue), {"batch": record.id}, maxlen=1000, approximate=True)
        self._enqueue_chunks(record.queue, [ChunkRef(record.id, n) for n in range(record.n_chunks)], pipe)

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
        jobs = [job for job in Job.fetch_many(job_ids, connection=self.redis, serializer=JSONSerializer) if job]
        with self.redis.pipeline() as pipe:
            for job_id in job_ids:
                queue.remove(job_id, pipeline=pipe)
                scheduled.remove(job_id, pipeline=pipe)
            for job in jobs:
                job.delete(pipeline=pipe, remove_from_queue=False)
            pipe.execute()

    # --- chunks ---------------------------------------------------------------------------------------------

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

    def drop_pending(self, queue: str, chunks: Iterable[ChunkRef]) -> None:
        members = [c.member for c in chunks]
        if members:
            self.redis.zrem(self.pending_key(queue), *members)

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

    # --- web page and item labels (issue 11) ------------------------------------------------------------------

    @staticmethod
    def tenant_batches_key(tenant: str) -> str:
        """zset of the tenant's batch ids scored by creation time: what the web page lists, newest first."""
        return f"{PREFIX}:tenant:{tenant}:batches"

    def list_batches(self, tenant: str, offset: int, limit: int) -> tuple[list[BatchRecord], int]:
        """One page of the tenant's batches, newest first, and how many the index holds. Batches whose keys have
        expired (retention) are dropped from the index as they are met."""
        key = self.tenant_batches_key(tenant)
        ids = [text(i) for i in self.redis.zrevrange(key, offset, offset + limit - 1)]
        records = [self.get_batch(batch_id) for batch_id in ids]
        gone = [batch_id for batch_id, record in zip(ids, records, strict=True) if record is None]
        if gone:
            self.redis.zrem(key, *gone)
        return [r for r in records if r is not None], int(self.redis.zcard(key)) - len(gone)

    def result_entries(self, batch_id: str, offset: int, limit: int) -> list[tuple[int, int, str]]:
        """(position in the results list, item index, judgement JSON) from `offset` on, in completion order."""
        entries = self.redis.lrange(self.batch_key(batch_id, "results"), offset, offset + limit - 1)
        out = []
        for position, entry in enumerate(entries, start=offset):
            index, _, raw = text(entry).partition("\n")
            out.append((position, int(index), raw))
        return out

    def results_at(self, batch_id: str, positions: Sequence[int]) -> list[Judgement | None]:
        """The judgements at these positions of the results list (one round trip): what one page of a table shows."""
        with self.redis.pipeline(transaction=False) as pipe:
            for position in positions:
                pipe.lindex(self.batch_key(batch_id, "results"), position)
            entries = pipe.execute()
        return [
            None if entry is None else Judgement.model_validate_json(text(entry).partition("\n")[2])
            for entry in entries
        ]

    def item_at(self, batch_id: str, index: int) -> Triple | None:
        raw = self.redis.lindex(self.batch_key(batch_id, "items"), index)
        return None if raw is None else Triple.model_validate_json(raw)

    def find_item_index(self, batch_id: str, item_id: str) -> int | None:
        """Input index of the first item with this id (ids are the user's and may repeat). Scans the items list a
        page at a time: for items not graded yet, whose place a results index can't tell."""
        key, page = self.batch_key(batch_id, "items"), 1000
        needle = json.dumps(item_id, ensure_ascii=False)
        for start in range(0, int(self.redis.llen(key)), page):
            for offset, raw in enumerate(self.redis.lrange(key, start, start + page - 1)):
                if needle in text(raw) and Triple.model_validate_json(raw).id == item_id:
                    return start + offset
        return None

    def set_batch_name(self, batch_id: str, name: str) -> None:
        """Name (or, with "", unname) a batch: a field of its hash, so it expires with the batch."""
        if name:
            self.redis.hset(self.batch_key(batch_id), "name", name)
        else:
            self.redis.hdel(self.batch_key(batch_id), "name")

    def labels_version(self, batch_id: str) -> int:
        """Bumped by every manual-label change, so caches of rows and agreement know they are stale."""
        return int(self.redis.hget(self.batch_key(batch_id), "labels_version") or 0)

    def set_manual_label(
        self, batch_id: str, position: int, label: Label | None, by: str, at: float
    ) -> tuple[Judgement, int]:
        """Set (or clear, with None) the manual label of the graded item at `position` of the results list, recording
        who and when as `manual_label_by` / `manual_label_at`. Results, agreement, reports and exports all read it.

        The entry is replaced by compare-and-set (one Lua step, retried when a concurrent change came first) and the
        batch's labels_version is bumped. Returns the updated judgement and the new labels_version. Raises KeyError
        when there is no result at `position`.
        """
        stamp = datetime.fromtimestamp(at, UTC).isoformat()
        for _ in range(20):
            raw_entry = self.redis.lindex(self.batch_key(batch_id, "results"), position)
            if raw_entry is None:
                raise KeyError(f"no result at {position} in batch {batch_id}")
            old_entry = text(raw_entry)
            index, _, raw_result = old_entry.partition("\n")
            judgement = Judgement.model_validate_json(raw_result).model_copy(
                update={"manual_label": label, "manual_label_by": by, "manual_label_at": stamp}
            )
            new_entry = f"{index}\n{judgement.model_dump_json()}"
            keys = [self.batch_key(batch_id), self.batch_key(batch_id, "results")]
            version = int(self._set_label(keys=keys, args=[position, old_entry, new_entry]))
            if version:
                return judgement, version
        raise RuntimeError(f"manual label at {position} in batch {batch_id}: too many concurrent changes")


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
