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
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis import Redis

from bench.common import WORK
from juiz.client import JuizClient
from juiz.settings import Settings
from juiz.store import ENGINE_CALL_BUCKETS, Store

READY_TIMEOUT_S = 1800  # a first engine start on CPU can take minutes
STOP_GRACE_S = 20


class StackError(RuntimeError):
    """A part of the stack did not start or died; the message names it and ends with its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def cpu_seconds(self) -> float:
        """User + system CPU time this child's own process has used so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def check(self) -> None:
        if self.process.poll() is not None:
            raise StackError(f"{self.name} exited with {self.process.returncode}; its log:\n{tail(self.log)}")


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


def tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextmanager
def child(name: str, command: Sequence[str], env: dict[str, str], log: Path) -> Iterator[Child]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield Child(name, process, log)
        finally:
            stop(process)


def stop(process: subprocess.Popen[Any]) -> None:
    """SIGTERM to the child's process group, SIGKILL if it lingers. Only ever the group we started."""
    if process.poll() is not None:
        return
    for sig, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def wait_until(ready: Any, timeout_s: float, children: Sequence[Child], what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        for c in children:
            c.check()
        if time.monotonic() > deadline:
            raise StackError(f"{what} not ready after {timeout_s:.0f}s")
        time.sleep(0.5)


def _redis_pings(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


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
    server = shutil.which("redis-server")
    if server is None:
        raise StackError("redis-server is not installed (apt-get install redis-server, or `make redis-server`)")
    workdir = WORK / name
    workdir.mkdir(parents=True, exist_ok=True)
    redis_port, api_port = free_port(), free_port()
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    api_key = secrets.token_urlsafe(16)
    values = {
        "JUIZ_REDIS_URL": redis_url,
        "JUIZ_API_KEYS": f"bench:{api_key}",
        "JUIZ_MODEL": model,
        "JUIZ_LOG_LEVEL": "WARNING",
        # One engine call of 256 items can take minutes on 2 CPU cores: never let RQ cut it.
        "JUIZ_JOB_TIMEOUT_S": "3600",
        "JUIZ_LEASE_S": "3700",
        **(env or {}),
    }
    full_env = {**os.environ, **values}
    settings = Settings.from_env(full_env)  # what the children will read
    with ExitStack() as stack:
        redis_args = [server, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        redis = stack.enter_context(
            child("redis-server", [*redis_args, "--dir", str(workdir)], full_env, workdir / "redis.log")
        )
        wait_until(lambda: _redis_pings(redis_url), 15, [redis], "redis-server")
        juiz = [sys.executable, "-m", "juiz.cli"]
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
