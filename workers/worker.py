"""`juiz worker`: one process, one judge engine loaded once, chunk jobs from Redis one after another.

    settings → logging → load and validate prompts → build the engine ONCE → connect to Redis → work

Why `SimpleWorker` (no fork per job): RQ's default `Worker` forks a work-horse per job. A forked child can't use a
CUDA context initialised in its parent, and loading the model in every child would cost 20–120 s per job, so the
job runs in the worker process itself, next to the engine it reaches through `workers.jobs.bind`.

SimpleWorker's caveat: it sends no heartbeat while a job runs, so RQ would have to wait for the longest possible
call before taking a silent worker as dead. `JuizWorker` runs a heartbeat thread during each job instead (RQ's own
`maintain_heartbeats`: worker key, execution and StartedJobRegistry entry, plus juiz's busy marker) every
`heartbeat_interval_s`, with a short TTL (`heartbeat_ttl_s`). A worker SIGKILLed mid-call stops beating; RQ's
maintenance (every `maintenance_interval_s`, run by idle workers and by busy workers' heartbeat threads) finds the
job abandoned and `workers.jobs.on_chunk_failure` gives its chunks back: recovery in about heartbeat_ttl_s +
maintenance_interval_s (≈ 30 s by default) whatever the call length. `job_timeout_s` only bounds one call (the
engine aborts at 90 % of it; RQ's own timeout is a backstop).

Faults the worker rides out or stops on:
- Redis away (a restart), at any point of the loop: the job retries each of its own steps with backoff (workers.jobs);
  RQ's bookkeeping around the job (`execute_job`, heartbeats, maintenance, suspension checks, the dequeue) waits for
  Redis instead of quitting, however long it is away; and should RQ's `work` loop end on a Redis fault anyway (it
  quits on any exception it does not expect), `run` starts it again once Redis answers. The worker never exits for a
  `ConnectionError`; what a fault left half-done (a job lost between queue and registry) is requeued by the sweeper.
  Should its worker key expire meanwhile (no heartbeat reached Redis within its TTL) and RQ's maintenance drop it from
  the registry, its next heartbeat (idle, or the job's heartbeat thread) notices and registers it again.
- Redis refusing writes (full at maxmemory with noeviction, a read-only replica, MISCONF): the same as away
  (juiz.runtime.retry.REDIS_ERRORS), except that a worker waits for a write to get through, not for a PING (which a
  full Redis still answers). RQ's own writes (register_birth, heartbeats, set_state, the job's status) are among the
  steps waited out; /ready and /metrics report the store not writable (the worker itself can't write to say so).
- A dead engine (`EngineDeadError`): the job gives its chunks back and the worker stops, deregistered (so /ready
  drops it), and the process exits non-zero (`ENGINE_DEAD_EXIT`) for a supervisor to restart it.

Fairness: /v1/grade's priority queue is served first, but at most `priority_burst` jobs in a row before one batch job.

RQ's scheduler (which moves a retry due after a backoff back to its queue) normally runs in a process forked from
the worker; here it runs in a thread instead, for the same reason as above (workers.scheduler).

`juiz worker --gpus all|0,1` starts one such process per GPU with `CUDA_VISIBLE_DEVICES` pinned (workers.gpus); with
no GPU it runs one CPU worker in this process.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from redis import Redis
from rq.exceptions import DequeueTimeout, StopRequested
from rq.executions import Execution
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.timeouts import JobTimeoutException, TimerDeathPenalty
from rq.utils import now as rq_now
from rq.worker import SimpleWorker, Worker, WorkerStatus
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_delay,
    stop_any,
    stop_never,
    stop_when_event_set,
    wait_exponential,
)

from juiz.engines.base import JudgeEngine
from juiz.judging.backend import build_engine
from juiz.runtime.errors import EngineDeadError, InputError
from juiz.runtime.retry import REDIS_ERRORS, waiting_helps
from juiz.runtime.settings import Settings
from juiz.store import Store
from juiz.store.connection import redis_client
from juiz.store.sweeper import sweep
from workers import jobs
from workers.scheduler import SchedulerThread, enqueue_due_retries

log = logging.getLogger(__name__)

ENGINE_DEAD_EXIT = 3  # exit code of a worker whose engine died
BAD_SETTING_EXIT = 2  # a setting it cannot start with (as `juiz` exits on bad input)
JOB_FUNCTIONS = frozenset({f"{jobs.__name__}.{jobs.grade_chunk.__name__}"})  # the one function a juiz job may name


class JuizWorker(SimpleWorker):
    """RQ's SimpleWorker with a heartbeat thread during jobs, Redis outages ridden out, a bounded priority queue, the
    judge model announced, and a stop (exit non-zero) when the engine dies."""

    settings: Settings
    store: Store
    model_id: str = ""
    priority_streak: int = 0

    @functools.cached_property
    def stop_event(self) -> threading.Event:
        """Set by a stop the operator asked for (SIGINT/SIGTERM): waits for Redis end, `run` does not work again."""
        return threading.Event()

    @property
    def stop_asked(self) -> bool:
        return self.stop_event.is_set()

    def request_stop(self, signum: Any, frame: Any) -> None:
        self.stop_event.set()
        super().request_stop(signum, frame)

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        # Short: renewed every heartbeat_interval_s while the job runs, so silence means a dead worker.
        return self.settings.heartbeat_ttl_s

    @functools.cached_property
    def registration_lock(self) -> threading.RLock:
        """One registration at a time: the main loop and a job's heartbeat thread may both find it lost."""
        return threading.RLock()

    def register_birth(self) -> None:
        with self.registration_lock:
            super().register_birth()
            self.store.jobs.announce_model(self.key, self.model_id)

    def is_registered(self) -> bool:
        """This worker's hash is whole (the model field is written last) and in RQ's registry sets: the queues' (read
        by claim's fair share) and the global one (Worker.all: /ready, /metrics)."""
        if not self.store.jobs.announced(self.key):
            return False
        registries = [Worker.all_keys(connection=self.connection), *(Worker.all_keys(queue=q) for q in self.queues)]
        return all(self.key in keys for keys in registries)

    def keep_registered(self) -> None:
        """Register again if Redis lost this worker's registration while the worker lives on.

        The worker's key expires when no heartbeat reaches Redis within its TTL (Redis away or restarting for that
        long; a key whose TTL passed while Redis was down is gone when it loads its AOF), and then whichever worker
        runs RQ's maintenance next takes it out of the registry sets (`clean_worker_registry`). RQ's next heartbeat
        recreates the hash, but nothing puts the worker back in the sets: it would go on grading unseen by /ready and
        by claim's fair share. RQ's public steps: register_death (register_birth refuses a key without a death date),
        register_birth, then the state the worker is in."""
        if self.stop_asked or self.is_registered():
            return
        with self.registration_lock:
            if self.stop_asked or self.is_registered():
                return
            self.log.warning(
                "worker %s: its registration was lost (key expired while Redis was away); registering again", self.name
            )
            self.register_death()
            self.register_birth()
            self.set_state(self.get_state())

    def perform_job(self, job: Job, queue: Queue, execution: Execution) -> bool:
        beat = Heartbeat(self, job, execution)
        beat.start()
        try:
            return bool(super().perform_job(job, queue, execution))
        finally:
            beat.stop()

    def execute_job(self, job: Job, queue: Queue) -> None:
        # RQ imports and calls whatever function a job's hash names, so write access to Redis would be code execution
        # here. Only juiz's own job function runs; func_name is read from the JSON job data without importing it.
        if job.func_name not in JOB_FUNCTIONS:
            self.log.error("refused job %s: it names %r, not juiz's job function", job.id, job.func_name)
            queue.failed_job_registry.add(job, exc_string=f"refused: {job.func_name!r} is not a juiz job function")
            job.set_status(JobStatus.FAILED)
            return
        try:
            super().execute_job(job, queue)
        except REDIS_ERRORS:
            # RQ's bookkeeping around the job failed (Redis restarting). The job's results are stored already (the
            # job retries its own writes); its registry entry expires and maintenance tidies it. Don't quit.
            self.log.exception("Redis away or refusing writes around job %s; waiting for it", job.id)
            self.wait_for_redis()
        binding = jobs.bound()
        if binding.engine_dead is not None:
            self.log.error("engine dead; worker %s stops", self.name)
            raise StopRequested  # RQ's work loop ends on it, then deregisters the worker

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        try:
            super().heartbeat(timeout, pipeline)
            if pipeline is None:  # not one of RQ's beats queued in its own pipeline (a job starting)
                self.keep_registered()
        except REDIS_ERRORS:
            self.log.warning("heartbeat failed: Redis away or refusing writes")

    def clean_abandoned_jobs(self) -> None:
        """RQ's StartedJobRegistry cleanup for this worker's queues, as a job's heartbeat thread runs it (`Heartbeat`):
        an abandoned job's failure callback (`on_chunk_failure`: its chunks back to `pending`) runs at once.

        RQ's `clean_registries` runs those callbacks under the signal-based death penalty, which only works in the
        main thread: from the heartbeat thread it raised "ValueError: signal only works in main thread" and the chunks
        waited for RQ's retry or the sweeper. The registry takes a death penalty class of its own (RQ's public
        API): `ThreadDeathPenalty`. The rest of RQ's maintenance (finished, failed, deferred registries) waits for
        the main loop: nothing waits on it."""
        for queue in self.queues:
            if not queue.acquire_maintenance_lock():  # another worker cleans this queue now
                continue
            try:
                StartedJobRegistry(
                    queue=queue,
                    job_class=self.job_class,
                    serializer=self.serializer,
                    death_penalty_class=ThreadDeathPenalty,
                ).cleanup()
            finally:
                queue.release_maintenance_lock()
        # Due again in one maintenance interval, as after RQ's own cleaning (the heartbeat keeps that pace).
        self.last_cleaned_at = rq_now()  # type: ignore[assignment]  # RQ declares it with its first value, None

    def run_maintenance_tasks(self) -> None:
        try:
            super().run_maintenance_tasks()
            self.sweep()
        except REDIS_ERRORS:
            self.log.warning("maintenance skipped: Redis away or refusing writes")
            self.wait_for_redis()

    def sweep(self) -> None:
        """The sweeper's pass, when this worker gets its lease (juiz.store.sweeper): chunks no job will grade,
        requeued."""
        try:
            sweep(jobs.bound().store, self.name)
        except REDIS_ERRORS:
            raise
        except Exception:  # a sweep that fails must not stop the worker; the next one tries again
            self.log.exception("sweep failed")

    def check_for_suspension(self, burst: bool) -> None:
        while True:
            try:
                return super().check_for_suspension(burst)
            except REDIS_ERRORS:
                self.wait_for_redis()

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        """RQ's dequeue loop (heartbeat, maintenance, a blocking `Queue.dequeue_any`), with juiz's queue order and
        Redis faults waited out at every step.

        Written here because RQ has no public way to order the queues per dequeue (its own strategies set a private
        attribute); everything it calls is RQ's public API. A job dequeued just as Redis died waits in RQ's
        intermediate queue (requeued by RQ's maintenance) or, if lost, is requeued by the sweeper."""
        idle_since = time.monotonic()
        while True:
            if self.stop_asked:  # asked while Redis was away: RQ's handler could not tell the loop
                raise StopRequested
            try:
                self.set_state(WorkerStatus.IDLE)
                self.heartbeat()
                if self.should_run_maintenance_tasks:
                    self.run_maintenance_tasks()
                wait = timeout
                if max_idle_time is not None:
                    left = math.ceil(max_idle_time - (time.monotonic() - idle_since))
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                result = self.queue_class.dequeue_any(
                    self.ordered_queues(),
                    wait,
                    connection=self.connection,
                    job_class=self.job_class,
                    serializer=self.serializer,
                    death_penalty_class=self.death_penalty_class,
                )
            except DequeueTimeout:
                continue
            except REDIS_ERRORS:
                self.wait_for_redis()
                continue
            if result is not None:
                job, queue = result
                self.count_dequeued(queue)
                self.log.info("Worker %s: %s: %s (%s)", self.name, queue.name, job.description, job.id)
            return result

    def ordered_queues(self) -> list[Queue]:
        """Priority first, but after `priority_burst` priority jobs in a row the batch queue goes first once."""
        priority = self.settings.priority_queue
        batch_first = self.priority_streak >= self.settings.priority_burst
        return sorted(self.queues, key=lambda q: (q.name == priority) == batch_first)

    def count_dequeued(self, queue: Queue) -> None:
        self.priority_streak = self.priority_streak + 1 if queue.name == self.settings.priority_queue else 0

    def teardown(self) -> None:
        try:
            super().teardown()
        except REDIS_ERRORS:
            # Can't deregister now: the worker key expires on its own TTL; `run` re-registers if it works again.
            self.log.warning("worker %s could not deregister: Redis away", self.name)
            with contextlib.suppress(Exception):
                self.unsubscribe()

    def wait_for_redis(self, deadline_s: float | None = None) -> None:
        """Probe with a small write, with exponential backoff, until Redis takes it; with `deadline_s`, the error
        propagates after it.

        Without a deadline it waits as long as Redis is away or refuses writes: a worker never exits for either. A
        stop asked for meanwhile (SIGTERM) ends the wait with RQ's StopRequested, so the work loop ends."""
        for attempt in Retrying(
            retry=retry_if_exception(waiting_helps),
            wait=wait_exponential(multiplier=0.2, max=5),
            stop=stop_any(
                stop_when_event_set(self.stop_event), stop_never if deadline_s is None else stop_after_delay(deadline_s)
            ),
            before_sleep=_log_once_per_outage,
            reraise=True,
        ):
            with attempt:
                if self.stop_asked:
                    raise StopRequested
                self.store.check_writable()


def _log_once_per_outage(state: RetryCallState) -> None:
    if state.attempt_number == 1:
        log.warning(
            "Redis away or refusing writes; waiting for it: %s", state.outcome.exception() if state.outcome else ""
        )


class ThreadDeathPenalty(TimerDeathPenalty):
    """RQ's timer-based death penalty, which works in any thread, for failure callbacks run off the main thread.

    RQ's sets a message on the exception class it is given, for good: every later JobTimeoutException (a job's own
    timeout too) would name this callback's timeout. It gets a subclass of its own instead."""

    def __init__(self, timeout: int, exception: type[BaseException] = JobTimeoutException, **kwargs: Any) -> None:
        super().__init__(timeout, type(exception.__name__, (exception,), {}), **kwargs)


class Heartbeat(threading.Thread):
    """While a job runs: RQ's heartbeats (worker, execution, StartedJobRegistry TTL), juiz's busy marker, and RQ's
    maintenance when due (the idle workers may all be busy: someone must still notice a dead one)."""

    def __init__(self, worker: JuizWorker, job: Job, execution: Execution) -> None:
        super().__init__(name=f"heartbeat-{job.id}", daemon=True)
        self.worker, self.job, self.execution = worker, job, execution
        self.stopping = threading.Event()

    def run(self) -> None:
        worker, settings = self.worker, self.worker.settings
        store = jobs.bound().store
        while not self.stopping.wait(settings.heartbeat_interval_s):
            try:
                worker.maintain_heartbeats(self.job, self.execution)
                if not self.stopping.is_set():  # the job is over: the main loop beats (and re-registers) from here
                    worker.keep_registered()
                store.still_grading(worker.key, settings.heartbeat_ttl_s)
                if worker.should_run_maintenance_tasks:
                    worker.clean_abandoned_jobs()
                    worker.sweep()
            except REDIS_ERRORS:
                log.warning("heartbeat failed: Redis away or refusing writes")
            except Exception:  # never let a heartbeat problem end the thread: silence would look like death
                log.exception("heartbeat failed")

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)


def build_worker(settings: Settings, redis: Redis, engine: JudgeEngine, name: str | None = None) -> JuizWorker:
    """A worker for this process's one engine; binds the job module to it. Used by `run` and by tests."""
    from juiz.judging.judge import Judge

    store = Store(redis, settings)
    queues = [store.rq_queue(name) for name in settings.queues]
    worker = JuizWorker(
        queues,
        connection=redis,
        serializer=JSONSerializer,
        name=name,
        worker_ttl=settings.worker_ttl_s,
        maintenance_interval=settings.maintenance_interval_s,
    )
    worker.settings = settings
    worker.store = store
    worker.model_id = engine.model_id
    jobs.bind(jobs.Binding(judge=Judge(engine), store=store, settings=settings, worker_name=worker.name))
    return worker


def run(settings: Settings, engine: JudgeEngine, *, burst: bool = False, name: str | None = None) -> bool:
    """Connect to Redis and work until stopped (or, with burst, until the queues are empty).

    Raises EngineDeadError when the worker stopped because its engine died (its work is back in the queue).
    """
    redis = redis_client(settings)  # retries a connection a Redis restart left stale, as the API's does
    _retried(Store(redis, settings).check_writable)  # Redis may be restarting, or full, too: wait rather than exit
    worker = build_worker(settings, redis, engine, name=name)
    scheduler = None if burst else SchedulerThread(settings, redis)
    if scheduler is not None:
        scheduler.start()
    log.info("worker %s ready: model %s, queues %s", worker.name, engine.model_id, ", ".join(settings.queues))
    worked = False
    try:
        while True:
            try:
                if burst:  # due retries queued before the queues drain
                    enqueue_due_retries(settings, redis)
                worked = worker.work(burst=burst, logging_level=settings.log_level) or worked
            except REDIS_ERRORS:
                log.exception("worker %s: Redis away while starting or stopping its work loop", worker.name)
            dead = jobs.bound().engine_dead
            if dead is not None:
                raise dead
            if burst or worker.stop_asked:
                return worked
            # RQ's loop quits on an exception it does not expect (a Redis fault at an unguarded step): start it again.
            log.error("worker %s: the work loop ended without a stop request; starting it again", worker.name)
            _retried(worker.register_death)  # marks the old registration dead, so registering again is allowed
    finally:
        if scheduler is not None:
            scheduler.stop()
        jobs.unbind()
        redis.close()


def _retried(step: Any) -> None:
    """`step()` retried with backoff for as long as Redis is away or refuses writes."""
    for attempt in Retrying(
        retry=retry_if_exception(waiting_helps),
        wait=wait_exponential(multiplier=0.2, max=5),
        before_sleep=_log_once_per_outage,
        reraise=True,
    ):
        with attempt:
            step()


def load_prompts() -> None:
    """Every prompt file parses, and the default options can be served; fail before loading a model otherwise."""
    import prompts
    from juiz.judging.plan import validate_options
    from schemas import BatchOptions

    for prompt_id in prompts.available():
        metric, version, lang = prompts.parse_prompt_id(prompt_id)
        prompts.load(metric, version, lang or "en")
    validate_options(BatchOptions())


def main(argv: Sequence[str] | None = None) -> int:
    """One worker process; `python -m workers.worker [--burst]`."""
    parser = argparse.ArgumentParser(prog="juiz-worker")
    parser.add_argument("--burst", action="store_true", help="quit when the queues are empty")
    args = parser.parse_args(argv)
    try:
        settings = Settings.from_env()
        logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger().setLevel(settings.log_level)
        load_prompts()
        engine = build_engine(settings)
    except InputError as exc:  # a bad setting: one line naming it, as `juiz worker` prints it, never a traceback
        print(f"juiz-worker: error: {exc}", file=sys.stderr)
        return BAD_SETTING_EXIT
    try:
        run(settings, engine, burst=args.burst)
    except EngineDeadError as exc:
        log.error("worker stopped: the engine died (%s); its work is back in the queue", exc)
        return ENGINE_DEAD_EXIT
    finally:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
