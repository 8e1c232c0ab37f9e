"""The whole service on this machine for a benchmark: a private redis-server, `juiz serve` and ONE worker.

Each part is a subprocess in its own process group (vLLM's engine-core process goes down with its worker), logging
to bench/work/<name>/; all are stopped on the way out, also on an error or Ctrl-C. The clock starts only once
GET /ready says a worker listens (the worker announces itself after its engine has loaded) and a warm-up batch
has gone through, so start-up and first-call costs are never part of a measurement.

`fake=True` runs `bench.fake_worker` instead of `juiz worker`: a FAKE engine, for measuring the API alone.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

import httpx
from redis import Redis

from bench.common import WORK
from juiz.client import JuizClient
from juiz.processes import Child, child, free_port, private_redis, wait_until
from juiz.settings import Settings
from juiz.store import ENGINE_CALL_BUCKETS, Store

READY_TIMEOUT_S = 1800  # a first engine start on CPU can take minutes


@dataclass
class Stack:
    url: str
    api_key: str
    redis_url: str
    settings: Settings
    children: list[Child] = field(default_factory=list)

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
) -> Iterator[Stack]:
    """Redis + API + one worker, ready to take batches; everything stopped on exit. Logs in bench/work/<name>/."""
    workdir = WORK / name
    workdir.mkdir(parents=True, exist_ok=True)
    api_port = free_port()
    api_key = secrets.token_urlsafe(16)
    with ExitStack() as stack:
        redis_url, redis = stack.enter_context(private_redis(workdir, dict(os.environ)))
        values = {
            "JUIZ_REDIS_URL": redis_url,
            "JUIZ_API_KEYS": f"bench:{api_key}",
            "JUIZ_MODEL": model,
            "JUIZ_LOG_LEVEL": "WARNING",
            # One engine call of 256 items can take minutes on 2 CPU cores: never let RQ cut it.
            "JUIZ_JOB_TIMEOUT_S": "3600",
            "JUIZ_LEASE_S": "3700",
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
        worker = stack.enter_context(child("worker", worker_cmd, full_env, workdir / "worker.log"))
        s = Stack(f"http://127.0.0.1:{api_port}", api_key, redis_url, settings, [redis, api, worker])

        def ready() -> bool:
            try:
                return bool(httpx.get(f"{s.url}/ready", timeout=5).json().get("ready"))
            except (httpx.HTTPError, ValueError):
                return False

        wait_until(ready, ready_timeout_s, s.children, "the API and its worker")
        yield s
