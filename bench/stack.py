"""The whole service on this machine for a benchmark: a private redis-server, `juiz serve` and ONE worker.

Each part is a subprocess in its own process group (vLLM's engine-core process goes down with its worker), logging
to bench/work/<name>/; all are stopped on the way out, also on an error or Ctrl-C. The clock starts only once
GET /ready says a worker listens (the worker announces itself after its engine has loaded) and a warm-up batch
has gone through, so start-up and first-call costs are never part of a measurement.

`fake=True` runs `bench.fake_worker` instead of `juiz worker`: a FAKE engine, for measuring the API alone.
`workers=N` starts N of them. `durable_redis=True` gives the stack a `DurableRedis` (append-only file, fsync always)
that a benchmark can stop and start again on the same port without losing what it held (bench/chaos.py).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from redis import Redis
from redis.exceptions import RedisError
from rq import Queue, Worker

from bench.common import WORK
from juiz.clients.http import JuizClient
from juiz.runtime.errors import StartError
from juiz.runtime.processes import Child, child, free_port, private_redis, redis_pings, stop, wait_until
from juiz.runtime.settings import Settings
from juiz.store import ENGINE_CALL_BUCKETS, Store

READY_TIMEOUT_S = 1800  # a first engine start on CPU can take minutes


class DurableRedis:
    """A private redis-server whose append-only file is on (`--appendonly yes --appendfsync always`), so that it can
    be stopped (SHUTDOWN, as `docker restart` does) and started again on the same port and directory with every
    acknowledged write still there — the restart tests/integration/test_outages.py puts the workers through."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        server = shutil.which("redis-server")
        if server is None:
            raise StartError("redis-server is not installed (apt-get install redis-server, or `make system-deps`)")
        self.server, self.env = server, env
        self.workdir = workdir / "redis-aof"
        shutil.rmtree(self.workdir, ignore_errors=True)  # a previous run's data would come back on the first start
        self.workdir.mkdir(parents=True)
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = workdir / "redis.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start it and wait until it answers PING (the AOF is loaded by then); returns the wall-clock time it did."""
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir), "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"]
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                [self.server, *args], env=self.env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        wait_until(lambda: redis_pings(self.url), 30, [Child("redis-server", self.process, self.log)], "redis-server")
        return time.time()

    def shutdown(self) -> None:
        """SHUTDOWN: the AOF is flushed and the server exits."""
        client = Redis.from_url(self.url, socket_timeout=5)
        with contextlib.suppress(RedisError):  # the server closes the connection as it goes
            client.shutdown()
        client.close()
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                stop(self.process)

    def close(self) -> None:
        if self.process is not None:
            stop(self.process)


@dataclass
class Stack:
    url: str
    api_key: str
    redis_url: str
    settings: Settings
    children: list[Child] = field(default_factory=list)
    redis_server: DurableRedis | None = None  # with durable_redis=True: restartable; its process is not a child

    def client(self, timeout_s: float = 3600.0) -> JuizClient:
        return JuizClient(self.url, api_key=self.api_key, timeout_s=timeout_s)

    def check(self) -> None:
        for c in self.children:
            c.check()

    def cpu_seconds(self) -> dict[str, float]:
        return {c.name: c.cpu_seconds() for c in self.children}

    def engine_counters(self) -> dict[str, float]:
        """What the worker recorded: engine calls, items graded in them and seconds spent in them (cumulative)."""
        redis = Redis.from_url(self.redis_url)
        try:
            store = Store(redis, self.settings)
            counters = store.counters()
            _, seconds, calls = store.histogram("engine_call_seconds", ENGINE_CALL_BUCKETS)
        finally:
            redis.close()
        return {
            "engine_calls": calls,
            "engine_items": counters.get("engine_items", 0),
            "engine_seconds": round(seconds, 3),
            "cache_hits": counters.get("cache_hits", 0),
        }


@contextmanager
def service(
    name: str,
    model: str,
    *,
    fake: bool = False,
    env: dict[str, str] | None = None,
    ready_timeout_s: float = READY_TIMEOUT_S,
    workers: int = 1,
    durable_redis: bool = False,
    api_keys: str = "",
) -> Iterator[Stack]:
    """Redis + API + `workers` workers, ready to take batches (every worker registered); everything stopped on exit.
    Logs in bench/work/<name>/. `api_keys`: more `tenant:key` entries beside the stack's own (tenant `bench`)."""
    workdir = WORK / name
    workdir.mkdir(parents=True, exist_ok=True)
    api_port = free_port()
    api_key = secrets.token_urlsafe(16)
    with ExitStack() as stack:
        children: list[Child] = []
        durable: DurableRedis | None = None
        if durable_redis:
            durable = DurableRedis(workdir, dict(os.environ))
            stack.callback(durable.close)
            durable.start()
            redis_url = durable.url
        else:
            redis_url, redis = stack.enter_context(private_redis(workdir, dict(os.environ)))
            children.append(redis)
        values = {
            "JUIZ_REDIS_URL": redis_url,
            "JUIZ_API_KEYS": ",".join(filter(None, [f"bench:{api_key}", api_keys])),
            "JUIZ_MODEL": model,
            "JUIZ_LOG_LEVEL": "WARNING",
            # One engine call of 256 items can take minutes on 2 CPU cores: never let RQ cut it.
            "JUIZ_JOB_TIMEOUT_S": "3600",
            # Benchmarks drive the API as hard as they can from one tenant; the per-tenant limit would pace them.
            "JUIZ_RATE_LIMIT_PER_MINUTE": "0",
            **(env or {}),
        }
        full_env = {**os.environ, **values}
        settings = Settings.from_env(full_env)  # what the children will read
        juiz = [sys.executable, "-m", "juiz_cli"]
        api = stack.enter_context(
            child("API", [*juiz, "serve", "--port", str(api_port)], full_env, workdir / "api.log")
        )
        worker_cmd = [sys.executable, "-m", "bench.fake_worker"] if fake else [*juiz, "worker"]
        children.append(api)
        for n in range(workers):
            label, log_name = ("worker", "worker.log") if workers == 1 else (f"worker-{n}", f"worker-{n}.log")
            children.append(stack.enter_context(child(label, worker_cmd, full_env, workdir / log_name)))
        s = Stack(f"http://127.0.0.1:{api_port}", api_key, redis_url, settings, children, durable)

        def ready() -> bool:
            try:
                if not httpx.get(f"{s.url}/ready", timeout=5).json().get("ready"):
                    return False
            except (httpx.HTTPError, ValueError):
                return False
            with Redis.from_url(redis_url) as client:
                return Worker.count(queue=Queue(settings.queue, connection=client)) >= workers

        wait_until(ready, ready_timeout_s, s.children, "the API and its worker")
        yield s
