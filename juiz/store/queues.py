"""RQ's side of the store: one RQ job per chunk, queued with the batch, taken off its queue when its chunk is claimed by
another job or its batch is cancelled; and the workers RQ knows for a queue (claim's fair share). RQ's keys are read
and written through RQ's public API only, never by juiz's scripts nor by their names."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC
from typing import Any

from redis import Redis
from rq import Callback, Queue, Retry, Worker
from rq.exceptions import InvalidJobOperation
from rq.job import Job
from rq.registry import ScheduledJobRegistry
from rq.serializers import JSONSerializer

from juiz.runtime.settings import Settings
from juiz.store.keys import batch_key, text
from schemas import WorkerView

JOB_FUNCTION = "workers.jobs.grade_chunk"  # by name: the API never imports the worker side
FAILURE_CALLBACK = "workers.jobs.on_chunk_failure"
MODEL_FIELD = "juiz_model"  # set in the RQ worker's own hash by the worker (announce_model)


class JuizQueue(Queue):
    """RQ's Queue with a maintenance lock that lasts a minute, not RQ's 899 s: a worker killed while running
    maintenance (busy workers run it from their heartbeat thread) must not stop everyone's for 15 minutes, which
    would hold up the recovery of killed workers' chunks."""

    MAINTENANCE_LOCK_S = 60

    def acquire_maintenance_lock(self) -> bool:
        return bool(self.connection.set(self.registry_cleaning_key, 1, nx=True, ex=self.MAINTENANCE_LOCK_S))


class ChunkJobs:
    """The RQ jobs of chunks. A chunk is (batch id, chunk no); `juiz.store.chunks.ChunkRef` is one."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings

    def rq_queue(self, name: str) -> Queue:
        return JuizQueue(
            name, connection=self.redis, serializer=JSONSerializer, default_timeout=self.settings.job_timeout_s
        )

    def live_workers(self, queue_name: str) -> list[str]:
        """The keys of the workers registered for the queue whose record is alive, through RQ's API (`Worker.all`:
        a worker's record lapses when its heartbeat stops, before RQ's maintenance cleans the registry; RQ also drops
        a lapsed worker from its global registry there, as its maintenance does)."""
        return [worker.key for worker in Worker.all(queue=self.rq_queue(queue_name))]

    def announce_model(self, worker_key: str, model: str) -> None:
        """The judge model a worker serves, in RQ's own worker hash: it lives and dies with the worker's heartbeat."""
        self.redis.hset(worker_key, MODEL_FIELD, model)

    def announced(self, worker_key: str) -> bool:
        """The worker's hash is whole (the model field is written last, after RQ's register_birth)."""
        return bool(self.redis.hexists(worker_key, MODEL_FIELD))

    def workers(self) -> list[WorkerView]:
        """RQ workers listening to our queues, with the model each announced. A worker drops out when its heartbeat
        lapses (RQ's worker key expires)."""
        ours = set(self.settings.queues)
        views = []
        for worker in Worker.all(connection=self.redis):
            queues = worker.queue_names()
            if not ours.intersection(queues):
                continue
            model = self.redis.hget(worker.key, MODEL_FIELD)
            heartbeat = worker.last_heartbeat
            if heartbeat is not None and heartbeat.tzinfo is None:
                heartbeat = heartbeat.replace(tzinfo=UTC)
            views.append(
                WorkerView(
                    name=worker.name,
                    model=text(model) if model else None,
                    state=str(worker.get_state()),
                    queues=queues,
                    last_heartbeat=heartbeat,
                )
            )
        return sorted(views, key=lambda w: w.name)

    def enqueue(self, queue_name: str, chunks: Sequence[tuple[str, int]], pipe: Any) -> None:
        """Queue one RQ job per chunk (in `pipe`), remembering which job is each chunk's, for `claim`."""
        queue = self.rq_queue(queue_name)
        jobs = [self._job_data(batch_id, chunk_no, queue) for batch_id, chunk_no in chunks]
        for (batch_id, chunk_no), job in zip(chunks, jobs, strict=True):
            pipe.hset(batch_key(batch_id, "chunkjobs"), str(chunk_no), job.job_id)
            pipe.sadd(batch_key(batch_id, "jobs"), job.job_id)
        queue.enqueue_many(jobs, pipeline=pipe)

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

    def drop(self, queue_name: str, job_ids: Sequence[str]) -> None:
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

    def drop_batch(self, batch_id: str, queue_name: str) -> None:
        """Take every job queued or scheduled for a (cancelled) batch off its queue, and delete it."""
        job_ids = [text(j) for j in self.redis.smembers(batch_key(batch_id, "jobs"))]
        queue = self.rq_queue(queue_name)
        scheduled = ScheduledJobRegistry(queue=queue)
        jobs = [job for job in Job.fetch_many(job_ids, connection=self.redis, serializer=JSONSerializer) if job]
        with self.redis.pipeline() as pipe:
            for job_id in job_ids:
                queue.remove(job_id, pipeline=pipe)
                scheduled.remove(job_id, pipeline=pipe)
            for job in jobs:
                try:
                    job.delete(pipeline=pipe, remove_from_queue=False)
                except (InvalidJobOperation, ValueError):
                    # A worker finished the job between fetch_many and here, and RQ deleted it (its status is read
                    # outside the pipeline): nothing left to delete. Or a worker is ending its run of the job: RQ
                    # reads the job's executions one by one outside the pipeline and raises ValueError for one whose
                    # hash went meanwhile; the job is its worker's to finish (result_ttl 0: RQ deletes it). Cancelling
                    # must not fail on either (both were a 500).
                    continue
            pipe.execute()
