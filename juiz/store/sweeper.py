"""The sweeper: finds chunks that no job will ever grade and queues them again.

A chunk is graded by the job that owns it, or by the job queued for it. A fault between two steps (Redis restarted
while a job gave its chunks back, a job taken off its queue just as Redis died, a failure callback that never ran)
can leave a chunk in no state: not stored, and no live job to grade it; its batch then stays `queued`/`running`
for ever. The sweeper is the backstop for all of them, whatever the path that led there:

    lease (one sweeper at a time, at most one pass per sweep_interval_s) → the batches not over that made no
    progress for sweep_grace_s → each chunk with items not stored whose owner (or queued) job is not alive →
    given back to `pending` with a fresh job (Store.release)

A job is alive when RQ can still run it: started (in its queue's StartedJobRegistry: if its worker dies, RQ's
maintenance hands its chunks back), queued (in its queue, or in RQ's intermediate queue between dequeue and start),
or scheduled (a retry waiting for its backoff). Everything is read through RQ's public API.

Requeueing is at-least-once: should a job thought dead still store its results, the store's stored-marker keeps
every item once. Runs from the workers' maintenance (`workers.worker`), so it needs no process of its own.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass

from rq.job import Job, JobStatus
from rq.registry import ScheduledJobRegistry, StartedJobRegistry
from rq.serializers import JSONSerializer

from juiz.store import PREFIX, BatchRecord, ChunkRef, Store, text

log = logging.getLogger(__name__)

LEASE_KEY = f"{PREFIX}:sweeper:lease"  # string: who sweeps now (expires after sweep_interval_s)
REPORT_KEY = f"{PREFIX}:sweeper"  # hash: stalled (batches with orphaned chunks at the last pass), swept_at


@dataclass(frozen=True)
class SweepReport:
    batches_checked: int
    stalled: int  # batches that had chunks no job would grade
    swept: list[ChunkRef]


class _LiveJobs:
    """The job ids RQ can still run on one queue, read once per pass."""

    def __init__(self, store: Store, queue_name: str) -> None:
        queue = store.rq_queue(queue_name)
        self.queue = queue
        self.queued = set(queue.get_job_ids()) | set(queue.intermediate_queue.get_job_ids())
        self.started = set(StartedJobRegistry(queue=queue).get_job_ids(cleanup=False))
        self.scheduled = set(ScheduledJobRegistry(queue=queue).get_job_ids(cleanup=False))

    def alive(self, job: Job | None) -> bool:
        if job is None:
            return False
        status = job.get_status(refresh=False)
        if status == JobStatus.STARTED:
            return job.id in self.started
        if status == JobStatus.QUEUED:
            return job.id in self.queued
        if status == JobStatus.SCHEDULED:
            return job.id in self.scheduled or job.id in self.queued
        return False


def sweep(store: Store, holder: str, *, force: bool = False) -> SweepReport | None:
    """One pass, if this process holds the lease (or `force`); None when another sweeper has it."""
    settings = store.settings
    redis = store.redis
    if not force and not redis.set(LEASE_KEY, holder, nx=True, ex=max(1, int(settings.sweep_interval_s))):
        return None
    now = time.time()
    live: dict[str, _LiveJobs] = {}
    checked, stalled, swept = 0, 0, []
    for raw_id in redis.zrange(store.active_key(), 0, -1):
        batch_id = text(raw_id)
        batch = store.get_batch(batch_id)
        if batch is None or batch.terminal:
            redis.zrem(store.active_key(), batch_id)
            continue
        last = batch.updated_at or batch.started_at or batch.created_at
        if now - last < settings.sweep_grace_s:
            continue  # progress lately: its chunks are being graded
        checked += 1
        if batch.queue not in live:
            live[batch.queue] = _LiveJobs(store, batch.queue)
        orphans = _orphans(store, batch, live[batch.queue])
        if not orphans:
            continue
        stalled += 1
        back = [c for owner, chunks in orphans.items() for c in store.release(batch.queue, owner, chunks)]
        swept += back
        log.warning("batch %s: %d chunk(s) no job would grade, queued again", batch_id, len(back))
    with redis.pipeline(transaction=False) as pipe:
        pipe.hset(REPORT_KEY, mapping={"stalled": stalled, "swept_at": repr(now)})
        if swept:
            pipe.hincrby(f"{PREFIX}:metrics", "chunks_swept", len(swept))
        pipe.execute()
    return SweepReport(batches_checked=checked, stalled=stalled, swept=swept)


def _orphans(store: Store, batch: BatchRecord, live: _LiveJobs) -> dict[str, list[ChunkRef]]:
    """The batch's chunks with items not stored and no live job, grouped by the (dead) job that owns them ('' for
    none): release gives a chunk back only for its owner."""
    redis = store.redis
    chunks = range(batch.n_chunks)
    with redis.pipeline(transaction=False) as pipe:
        for n in chunks:
            pipe.hget(store.batch_key(batch.id, "owner"), str(n))
            pipe.hget(store.batch_key(batch.id, "chunkjobs"), str(n))
            pipe.hmget(store.batch_key(batch.id, "stored"), list(batch.chunk_range(n)))
        replies = pipe.execute()
    candidates: list[tuple[int, str | None, str | None]] = []
    for n in chunks:
        owner, queued, stored = replies[3 * n : 3 * n + 3]
        if all(s is not None for s in stored):
            continue  # every item stored
        candidates.append((n, None if owner is None else text(owner), None if queued is None else text(queued)))
    if not candidates:
        return {}
    ids = sorted({job_id for _, owner, queued in candidates for job_id in (owner, queued) if job_id})
    jobs = dict(zip(ids, Job.fetch_many(ids, connection=redis, serializer=JSONSerializer), strict=True))
    orphans: dict[str, list[ChunkRef]] = defaultdict(list)
    for n, owner, queued in candidates:
        # The owner grades it now; with no owner, the job queued for it will.
        job_id = owner or queued
        if job_id is not None and live.alive(jobs.get(job_id)):
            continue
        orphans[owner or ""].append(ChunkRef(batch.id, n))
    return dict(orphans)


def stalled_batches(store: Store) -> int:
    """Batches the last sweep found with chunks no job would grade (the stuck-batch alarm of /metrics)."""
    value = store.redis.hget(REPORT_KEY, "stalled")
    return int(value) if value is not None else 0
