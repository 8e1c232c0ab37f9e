"""`juiz worker`: one process, one judge engine loaded once, chunk jobs from Redis one after another.

    settings → logging → load and validate prompts → build the engine ONCE → connect to Redis → work

Why `SimpleWorker` (no fork per job): RQ's default `Worker` forks a work-horse per job. A forked child can't use a
CUDA context initialised in its parent, and loading the model in every child would cost 20–120 s per job, so the
job runs in the worker process itself, next to the engine it reaches through `workers.jobs.bind`.

SimpleWorker's caveat: it sends no heartbeat while a job runs. RQ marks the job started with a TTL of
`job_timeout_s + heartbeat_grace_s` (our `JuizWorker` makes RQ's fixed 60 s grace configurable); a job that runs
past it looks abandoned and is handed to another worker. So a job must stay under `job_timeout_s` (RQ stops it
there), and chunk_size and coalesce_max_items bound how long one engine call, hence one job, takes: size them so
the largest call finishes well inside the timeout. A worker killed mid-chunk is recovered the same way: once its
job's TTL has passed, the next RQ maintenance run (`maintenance_interval_s`, and at every worker's start) retries
it; items already stored are skipped (see workers.jobs).

RQ's scheduler (which moves a retry due after a backoff back to its queue) normally runs in a process forked from
the worker; here it runs in a thread instead, for the same reason as above.

`juiz worker --gpus all|0,1` starts one such process per GPU with `CUDA_VISIBLE_DEVICES` pinned; with no GPU it
runs one CPU worker in this process.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from redis import Redis
from rq.defaults import DEFAULT_WORKER_TTL
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.scheduler import RQScheduler
from rq.serializers import JSONSerializer
from rq.worker import SimpleWorker

from juiz.engine import JudgeEngine, VLLMEngine
from juiz.settings import Settings
from juiz.store import Store
from workers import jobs

if TYPE_CHECKING:  # imported where used: the in-process engine's workers never load the server back end
    from juiz.openai_engine import OpenAIEngine

log = logging.getLogger(__name__)

MODEL_FIELD = "juiz_model"  # set in the RQ worker's own hash, so it lives and dies with the worker's heartbeat
JOB_FUNCTIONS = frozenset({f"{jobs.__name__}.{jobs.grade_chunk.__name__}"})  # the one function a juiz job may name


class JuizWorker(SimpleWorker):
    """RQ's SimpleWorker, with the abandonment grace taken from settings and the judge model announced."""

    heartbeat_grace_s: int = 60
    model_id: str = ""

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        if job.timeout == -1:
            return DEFAULT_WORKER_TTL
        return int(job.timeout or DEFAULT_WORKER_TTL) + self.heartbeat_grace_s

    def register_birth(self) -> None:
        super().register_birth()
        self.connection.hset(self.key, MODEL_FIELD, self.model_id)

    def execute_job(self, job: Job, queue: Queue) -> None:
        # RQ imports and calls whatever function a job's hash names, so write access to Redis would be code execution
        # here. Only juiz's own job function runs; func_name is read from the JSON job data without importing it.
        if job.func_name not in JOB_FUNCTIONS:
            self.log.error("refused job %s: it names %r, not juiz's job function", job.id, job.func_name)
            queue.failed_job_registry.add(job, exc_string=f"refused: {job.func_name!r} is not a juiz job function")
            job.set_status(JobStatus.FAILED)
            return
        super().execute_job(job, queue)


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


def build_worker(settings: Settings, redis: Redis, engine: JudgeEngine, name: str | None = None) -> JuizWorker:
    """A worker for this process's one engine; binds the job module to it. Used by `run` and by tests."""
    from juiz.judge import Judge

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
    worker.heartbeat_grace_s = settings.heartbeat_grace_s
    worker.model_id = engine.model_id
    jobs.bind(jobs.Binding(judge=Judge(engine), store=store, settings=settings, worker_name=worker.name))
    return worker


def run(settings: Settings, engine: JudgeEngine, *, burst: bool = False, name: str | None = None) -> bool:
    """Connect to Redis and work until stopped (or, with burst, until the queues are empty)."""
    redis = Redis.from_url(settings.redis_url)
    redis.ping()
    worker = build_worker(settings, redis, engine, name=name)
    scheduler = None if burst else SchedulerThread(settings, redis)
    if scheduler is not None:
        scheduler.start()
    log.info("worker %s ready: model %s, queues %s", worker.name, engine.model_id, ", ".join(settings.queues))
    try:
        # In burst mode RQ runs the scheduler once, in-process: due retries are queued before the queues drain.
        return worker.work(burst=burst, with_scheduler=burst, logging_level=settings.log_level)
    finally:
        if scheduler is not None:
            scheduler.stop()
        jobs.unbind()
        redis.close()


def load_prompts() -> None:
    """Every prompt file parses, and the default options can be served; fail before loading a model otherwise."""
    import prompts
    from juiz.judge import validate_options
    from schemas import BatchOptions

    for prompt_id in prompts.available():
        metric, version, lang = prompts.parse_prompt_id(prompt_id)
        prompts.load(metric, version, lang or "en")
    validate_options(BatchOptions())


def build_engine(settings: Settings) -> VLLMEngine | OpenAIEngine:
    """The real engine: vLLM in this process on the configured model, or (JUIZ_ENGINE=openai) a client of an
    OpenAI-compatible server serving it. Never a fake."""
    from juiz.judge import Judge
    from juiz.models import resolve_model

    if settings.engine == "openai":
        from juiz.openai_engine import build_openai_engine

        server = build_openai_engine(settings)
        warm = Judge(server).warm_up()
        log.info("judge server %s ready (format by %s); warmed up in %.1fs", server.base_url, server.dialect, warm)
        return server
    engine = VLLMEngine(resolve_model(settings.model), model_id=settings.model, max_model_len=settings.max_model_len)
    log.info("engine up in %.1fs; reply grammar compiled in %.1fs", engine.startup_s, Judge(engine).warm_up())
    return engine


def main(argv: Sequence[str] | None = None) -> int:
    """One worker process; `python -m workers.worker [--burst]`."""
    parser = argparse.ArgumentParser(prog="juiz-worker")
    parser.add_argument("--burst", action="store_true", help="quit when the queues are empty")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(settings.log_level)
    load_prompts()
    engine = build_engine(settings)
    try:
        run(settings, engine, burst=args.burst)
    finally:
        engine.close()
    return 0


# --- one worker per GPU --------------------------------------------------------------------------------------


def detect_gpus() -> list[str]:
    """GPU indices from `nvidia-smi -L` (or torch when nvidia-smi is missing); empty without a GPU."""
    if shutil.which("nvidia-smi"):
        try:
            listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True)
        except (OSError, subprocess.SubprocessError):
            return []
        return [str(n) for n, line in enumerate(listing.stdout.splitlines()) if line.startswith("GPU ")]
    try:
        import torch
    except ImportError:
        return []
    return [str(n) for n in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def select_gpus(spec: str | None) -> list[str]:
    """'all' → every GPU found; '0,1' → those; None/'none' → no GPU (one CPU worker)."""
    if spec is None or spec.lower() in ("", "none", "cpu"):
        return []
    if spec.lower() == "all":
        return detect_gpus()
    gpus = [part.strip() for part in spec.split(",") if part.strip()]
    if not all(g.isdigit() for g in gpus):
        from juiz.errors import InputError

        raise InputError("expected 'all' or GPU indices like 0,1", source="--gpus")
    return gpus


def launch(gpus: Sequence[str], *, burst: bool = False) -> int:
    """One worker process per GPU, each pinned with CUDA_VISIBLE_DEVICES; no GPU → one CPU worker, in this process.

    We pass SIGTERM on to every child, wait for all of them and report the worst exit code.
    """
    extra = ["--burst"] if burst else []
    if len(gpus) <= 1:
        if gpus:
            os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]
        return main(extra)
    children = []
    for gpu in gpus:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpu}
        children.append(subprocess.Popen([sys.executable, "-m", "workers.worker", *extra], env=env))
        log.info("started worker pid %d on GPU %s", children[-1].pid, gpu)

    def forward(signum: int, _frame: object) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    # SIGTERM (docker stop, systemd) reaches only us: pass it on. Ctrl-C already reaches the whole process group,
    # and a second SIGINT would make RQ stop a job mid-call, so we only wait.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    codes = [child.wait() for child in children]
    return max(codes, key=abs)


if __name__ == "__main__":
    raise SystemExit(main())
