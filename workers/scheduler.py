"""RQ's scheduler (it moves a retry due after its backoff back to its queue), run in the worker process.

RQ normally runs it in a process forked from the worker; a worker that holds a judge engine does not fork (see
workers.worker), so it runs in a thread here, and burst mode moves the due retries once instead."""

from __future__ import annotations

import logging
import threading

from redis import Redis
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer

from juiz.runtime.settings import Settings

log = logging.getLogger(__name__)


def enqueue_due_retries(settings: Settings, redis: Redis) -> None:
    """Burst mode: move the retries already due back to their queues once, as RQ's own burst start does.

    Not RQ's `with_scheduler` in burst mode: its maintenance step forks a scheduler process during a long job, and
    its stop joins that process with no limit; a SIGTERM that reaches the fork before it installs its own handler runs
    the worker's inherited one, which only sets a flag, and the worker hangs on the join (seen in the outage tests)."""
    scheduler = RQScheduler(settings.queues, connection=redis, interval=1, serializer=JSONSerializer)
    scheduler.acquire_locks()
    if not scheduler.acquired_locks:  # another worker's scheduler holds them: it moves the due retries
        return
    try:
        scheduler.register_birth()
        scheduler.enqueue_scheduled_jobs()
    finally:
        scheduler.release_locks()
        scheduler.register_death()


class SchedulerThread(threading.Thread):
    """RQ's scheduler loop (acquire lock → heartbeat → enqueue due jobs), in a thread rather than a forked process."""

    def __init__(self, settings: Settings, redis: Redis) -> None:
        super().__init__(name="rq-scheduler", daemon=True)
        self.interval = settings.scheduler_interval_s
        self.scheduler = RQScheduler(settings.queues, connection=redis, interval=1, serializer=JSONSerializer)
        self.stopping = threading.Event()

    def run(self) -> None:
        scheduler = self.scheduler
        scheduler.register_birth()
        try:
            while not self.stopping.is_set():
                try:
                    if scheduler.should_reacquire_locks:
                        scheduler.acquire_locks()
                    if scheduler.acquired_locks:
                        scheduler.heartbeat()
                        scheduler.enqueue_scheduled_jobs()
                except Exception:  # Redis away for a moment: try again next tick
                    log.exception("scheduler tick failed")
                self.stopping.wait(self.interval)
        finally:
            scheduler.release_locks()
            scheduler.register_death()

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)
