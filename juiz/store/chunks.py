"""Chunks and who grades them: the `pending` queue of chunks nobody is grading, each chunk's one owner, claiming
(with coalescing and fair shares) and giving back.

Every chunk has ONE owner at a time: the RQ job that claimed it (`claim`, one Lua script). A job claims its own chunk
and, to fill its engine call, other pending chunks (`pending` is the truth: a chunk leaves it when a job claims it,
in the same script). The claimed chunks' own RQ jobs are then taken off their queue through RQ's API; one dequeued
meanwhile runs, finds its chunk owned and stops. RQ's keys are never written by these scripts. A job that can't
finish (transient fault, dead engine, killed worker) gives the chunks it took back (`release`): back in `pending`,
with a fresh RQ job each; its own chunk stays its own while RQ's retry waits out its backoff.

`claim` names keys it reads from other keys (the candidate batches' hashes and owners): one atomic decision across
slots, fine on one Redis, not on Redis Cluster (see the package docstring). It touches juiz's keys only: the workers
its fair share is split between are listed before the script, through RQ's API (`ChunkJobs.live_workers`), and passed
in; the script counts those not grading by juiz's busy markers. `release` and `finish` are single-slot steps, each
safe to repeat.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis import Redis

from juiz.runtime.settings import Settings
from juiz.store.keys import (
    LUA_KEYS,
    batch_key,
    grading_key,
    last_batch_key,
    owned_key,
    pending_batches_key,
    pending_key,
    pending_tenants_key,
    queue_events_key,
    text,
)
from juiz.store.queues import ChunkJobs

_LUA = (
    LUA_KEYS
    + """
local function terminal(status) return status == 'done' or status == 'failed' or status == 'cancelled' end
local function split(member)
  local id, no = string.match(member, '^(.*):(%d+)$')
  return id, no
end
"""
)

# A job claims its own chunk and, to fill its engine call, other pending chunks whose RQ jobs are still queued.
# KEYS: pending zset, this job's owned set, pending-tenants zset.
# ARGV: own member ('' when only coalescing), job id, budget in items (-1: the fair share), coalesce_max_items,
#       chunk_size, how many pending chunks to look at, worker key, busy-marker TTL, owned-set TTL, items the job
#       holds already (for the fair share when gathering more), queue name, then the OTHER workers alive and
#       registered for the queue (their RQ worker keys; none unless budget is -1).
# Returns {0} when the own chunk is not this job's to grade, else {1, share, {claimed member, ...}, {their RQ jobs}}.
# Only juiz's keys are touched here. RQ's are not: the jobs of claimed chunks are taken off their queue by Chunks.claim,
# and the workers alive and registered are listed by Chunks.claim, both through RQ's API. That list is read just
# before the script, so a worker that starts or dies in between is counted as it was (a heuristic for splitting what
# waits, off by one worker for a moment); whether each is grading is read here, from juiz's busy markers, in the same
# atomic step that sets this worker's (read before, workers claiming at once each took a stale count: uneven shares).
# NOT single-slot: it decides, atomically, across the queue's keys, the candidate batches' hashes and owners and the
# workers' busy markers (see the package docstring for what a cluster would need).
_CLAIM = (
    _LUA
    + """
local job_id = ARGV[2]
local function size(total, cs, no) return math.min(cs, total - tonumber(no) * cs) end
local own_items = 0
if ARGV[1] ~= '' then
  local id, no = split(ARGV[1])
  -- pending → nobody holds it; already ours → a re-run of this very job (its worker died before giving it back)
  if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 and redis.call('HGET', batch_key(id, 'owner'), no) ~= job_id then
    return {0}
  end
  redis.call('HSET', batch_key(id, 'owner'), no, job_id)
  local b = redis.call('HMGET', batch_key(id), 'total', 'chunk_size')
  if b[1] then own_items = size(tonumber(b[1]), tonumber(b[2]), no) end
end
local budget = tonumber(ARGV[3])
local share = budget
if budget < 0 then
  -- fair share: what is waiting, split between the workers not grading right now (this one included)
  local free = 1
  for i = 12, #ARGV do
    if redis.call('EXISTS', grading_key(ARGV[i])) == 0 then free = free + 1 end
  end
  local have = own_items + tonumber(ARGV[10])
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
      local h = redis.call('HMGET', batch_key(id), 'status', 'total', 'chunk_size', 'tenant', 'created_at')
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
  for _, tenant in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local tb = pending_batches_key(ARGV[11], tenant)
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
    if redis.call('EXISTS', tb) == 0 then redis.call('ZREM', KEYS[3], tenant) end
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
          local job = redis.call('HGET', batch_key(c[2], 'chunkjobs'), c[3])
          redis.call('ZREM', KEYS[1], c[1])
          redis.call('HSET', batch_key(c[2], 'owner'), c[3], job_id)
          redis.call('SADD', KEYS[2], c[1])
          if job then
            redis.call('HDEL', batch_key(c[2], 'chunkjobs'), c[3])
            redis.call('SREM', batch_key(c[2], 'jobs'), job)
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
  for _, tenant in ipairs(served) do redis.call('ZADD', KEYS[3], 'XX', now, tenant) end
end
redis.call('SET', grading_key(ARGV[7]), job_id, 'EX', ARGV[8])
if #claimed > 0 then redis.call('EXPIRE', KEYS[2], ARGV[9]) end
return {1, share, claimed, superseded}
"""
)

# A job takes the chunks of small batches (one chunk each) submitted since it began, to grade them ahead of its own
# work (workers.jobs: small batches first). Newest first, up to a budget in items, each still pending and not over.
# KEYS: pending zset, this job's owned set.
# ARGV: job id, since, until (created_at bounds), budget in items, how many pending chunks to look at, owned-set TTL.
# Returns {{claimed member, ...}, {their RQ jobs}}. NOT single-slot: the queue's `pending`, the batches' hashes and
# owners, and the job's owned set, as `claim`.
_TAKE_SMALL = (
    _LUA
    + """
local claimed, superseded, budget = {}, {}, tonumber(ARGV[4])
for _, m in ipairs(redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[3], ARGV[2], 'LIMIT', 0, tonumber(ARGV[5]))) do
  local id, no = split(m)
  local b = redis.call('HMGET', batch_key(id), 'status', 'total', 'chunk_size')
  local total = tonumber(b[2])
  if b[1] and not terminal(b[1]) and total <= tonumber(b[3]) and total <= budget then
    local job = redis.call('HGET', batch_key(id, 'chunkjobs'), no)
    redis.call('ZREM', KEYS[1], m)
    redis.call('HSET', batch_key(id, 'owner'), no, ARGV[1])
    redis.call('SADD', KEYS[2], m)
    if job then
      redis.call('HDEL', batch_key(id, 'chunkjobs'), no)
      redis.call('SREM', batch_key(id, 'jobs'), job)
      superseded[#superseded + 1] = job
    end
    budget = budget - total
    claimed[#claimed + 1] = m
  end
end
if #claimed > 0 then redis.call('EXPIRE', KEYS[2], ARGV[6]) end
return {claimed, superseded}
"""
)

# Drop a job's ownership of chunks of ONE batch (theirs, or nobody's), the first step of giving them back.
# KEYS: batch, owner. ARGV: job id, chunk nos. Returns {created_at, tenant, {chunk nos}} with the chunks to put back
# in `pending`, or {} when the batch is over (or gone): its chunks are dropped, not given back.
_DISOWN = (
    _LUA
    + """
local back = {}
for i = 2, #ARGV do
  local owner = redis.call('HGET', KEYS[2], ARGV[i])
  if owner == ARGV[1] or not owner then
    redis.call('HDEL', KEYS[2], ARGV[i])
    back[#back + 1] = ARGV[i]
  end
end
local b = redis.call('HMGET', KEYS[1], 'status', 'created_at', 'tenant')
if not b[1] or terminal(b[1]) then return {} end
return {b[2], b[3], back}
"""
)

# Drop a job's ownership of chunks of ONE batch, those it still owns only. KEYS: owner. ARGV: job id, chunk nos.
_DISOWN_MINE = """
for i = 2, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[1] then redis.call('HDEL', KEYS[1], ARGV[i]) end
end
return 1
"""

# Drop a worker's busy marker if it still names this job. KEYS: busy marker. ARGV: job id.
_UNMARK = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""


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


class Chunks:
    def __init__(self, redis: Redis, settings: Settings, jobs: ChunkJobs) -> None:
        self.redis = redis
        self.settings = settings
        self.jobs = jobs
        self._claim = redis.register_script(_CLAIM)
        self._take_small = redis.register_script(_TAKE_SMALL)
        self._disown = redis.register_script(_DISOWN)
        self._disown_mine = redis.register_script(_DISOWN_MINE)
        self._unmark = redis.register_script(_UNMARK)

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
        large batch is split between the idle workers and a backlog fills every call. The workers: this one and those
        RQ has alive and registered for the queue (listed just before the script), less those grading (juiz's busy
        markers, read in the script). Returns None when `own` is not this job's to grade (done, cancelled, or given to
        a newer job after this one was taken as dead). `have`: items the job holds already (a second claim while
        gathering), counted in the share.
        """
        settings = self.settings
        scan = max(16, 4 * settings.coalesce_max_items // max(1, settings.chunk_size) + 16)
        others = [w for w in self.jobs.live_workers(queue) if w != worker_key] if budget is None else []
        reply = self._claim(
            keys=[pending_key(queue), owned_key(job_id), pending_tenants_key(queue)],
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
                have,
                queue,
                *others,
            ],
        )
        if not reply or int(reply[0]) == 0:
            return None
        superseded = [text(j) for j in reply[3]]
        if superseded:
            self.jobs.drop(queue, superseded)
        return Claim(share=int(reply[1]), chunks=[ChunkRef.parse(text(m)) for m in reply[2]])

    def take_small(self, queue: str, job_id: str, *, since: float, until: float, budget: int) -> list[ChunkRef]:
        """Take the pending chunks of small batches (one chunk each) of `queue` created between `since` and `until`,
        newest first, up to `budget` items: the job grades them ahead of its own work. Their RQ jobs are taken off
        the queue as `claim`'s are; the job finishes them with `done_with`."""
        scan = max(16, self.settings.coalesce_max_items // max(1, self.settings.chunk_size) + 16)
        reply = self._take_small(
            keys=[pending_key(queue), owned_key(job_id)],
            args=[job_id, since, until, budget, scan, self.settings.job_timeout_s + 3600],
        )
        superseded = [text(j) for j in reply[1]]
        if superseded:
            self.jobs.drop(queue, superseded)
        return [ChunkRef.parse(text(m)) for m in reply[0]]

    def chunk_events_cursor(self, queue: str) -> str:
        """The id of the queue's newest chunk event (a batch submitted, chunks given back); '0-0' if none."""
        newest = self.redis.xrevrange(queue_events_key(queue), count=1)
        return text(newest[0][0]) if newest else "0-0"

    def wait_for_chunks(self, queue: str, cursor: str, timeout_s: float) -> str:
        """Block until a chunk event newer than `cursor` (or `timeout_s`); returns the newest id seen."""
        block_ms = max(1, int(timeout_s * 1000))
        reply: Any = self.redis.xread({queue_events_key(queue): cursor}, count=1000, block=block_ms)
        return text(reply[0][1][-1][0]) if reply else cursor

    def last_batch_at(self, queue: str) -> float:
        """When the newest batch of `queue` was created (0 if none)."""
        value = self.redis.get(last_batch_key(queue))
        return float(text(value)) if value is not None else 0.0

    def owned(self, job_id: str) -> list[ChunkRef]:
        """The chunks a job took from other jobs and has not finished (left behind when its worker died)."""
        return [ChunkRef.parse(text(m)) for m in self.redis.smembers(owned_key(job_id))]

    def release(self, queue: str, job_id: str, chunks: Sequence[ChunkRef], *, requeue: bool = True) -> list[ChunkRef]:
        """Give chunks back: to `pending` and, with `requeue`, each with a fresh RQ job. Returns those given back.

        `requeue=False` is for a job's own chunk when RQ itself will run that job again (a retry).

        In steps, one slot each, every step safe to repeat: drop the job's ownership (per batch), put the chunks
        back in `pending` and the fairness index (the queue's keys, one transaction), forget them in the job's owned
        set. A crash between steps leaves a chunk owned by nobody and not pending: the job's re-run (its owned set
        still names the chunk) or the sweeper gives it back.
        """
        if not chunks:
            return []
        back: list[ChunkRef] = []
        with self.redis.pipeline(transaction=True) as pipe:
            for batch_id, nos in _by_batch(chunks).items():
                keys = [batch_key(batch_id), batch_key(batch_id, "owner")]
                reply = self._disown(keys=keys, args=[job_id, *nos])
                if not reply:
                    continue  # the batch is over: nothing to give back
                created, tenant = float(text(reply[0])), text(reply[1])
                mine = [ChunkRef(batch_id, int(n)) for n in reply[2]]
                if mine:
                    pipe.zadd(pending_key(queue), {c.member: created + c.chunk_no * 1e-6 for c in mine})
                    pipe.zadd(pending_batches_key(queue, tenant), {batch_id: created}, nx=True)  # claim's fairness
                    pipe.zadd(pending_tenants_key(queue), {tenant: created}, nx=True)
                    back += mine
            pipe.execute()
        self.redis.srem(owned_key(job_id), *(c.member for c in chunks))
        if back and requeue:
            with self.redis.pipeline(transaction=True) as pipe:
                self.jobs.enqueue(queue, back, pipe)
                pipe.xadd(queue_events_key(queue), {"released": len(back)}, maxlen=1000, approximate=True)
                pipe.execute()
        return back

    def finish(self, job_id: str, worker_key: str, chunks: Sequence[ChunkRef]) -> None:
        """The job is done with its chunks (stored, or nothing left to do): drop its ownership of those it still
        owns, its owned set and its busy marker (each step one slot, safe to repeat)."""
        self._disown_all_mine(job_id, chunks)
        self.redis.delete(owned_key(job_id))
        self._unmark(keys=[grading_key(worker_key)], args=[job_id])

    def done_with(self, job_id: str, chunks: Sequence[ChunkRef]) -> None:
        """The job is done with some of its chunks (those it took to grade first) and goes on with the rest: its
        ownership of them dropped and them out of its owned set (each step one slot, safe to repeat)."""
        if chunks:
            self._disown_all_mine(job_id, chunks)
            self.redis.srem(owned_key(job_id), *(c.member for c in chunks))

    def _disown_all_mine(self, job_id: str, chunks: Sequence[ChunkRef]) -> None:
        for batch_id, nos in _by_batch(chunks).items():
            self._disown_mine(keys=[batch_key(batch_id, "owner")], args=[job_id, *nos])

    def still_grading(self, worker_key: str, ttl_s: int) -> None:
        """Heartbeat of a busy worker: keep it out of the idle count that fair shares are computed from."""
        self.redis.expire(grading_key(worker_key), ttl_s)

    def drop_pending(self, queue: str, chunks: Iterable[ChunkRef]) -> None:
        members = [c.member for c in chunks]
        if members:
            self.redis.zrem(pending_key(queue), *members)

    def count_abandoned(self, chunks: Sequence[ChunkRef]) -> list[int]:
        """One more death of a worker while grading each chunk; returns the counts (a chunk that kills every worker
        that grades it must end, not go round for ever)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for chunk in chunks:
                key = batch_key(chunk.batch_id, "abandoned")
                pipe.hincrby(key, str(chunk.chunk_no), 1)
                pipe.expire(key, self.settings.retention_s or 30 * 86400)
            replies = pipe.execute()
        return [int(n) for n in replies[0::2]]

    def pending_count(self, queue: str) -> int:
        return int(self.redis.zcard(pending_key(queue)))


def _by_batch(chunks: Iterable[ChunkRef]) -> dict[str, list[int]]:
    """Chunk numbers grouped by batch, in the order met: one single-slot step per batch."""
    grouped: dict[str, list[int]] = {}
    for chunk in chunks:
        grouped.setdefault(chunk.batch_id, []).append(chunk.chunk_no)
    return grouped
