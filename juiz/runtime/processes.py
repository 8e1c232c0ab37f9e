"""Child processes juiz starts for a whole local stack (`juiz demo`, the benchmarks): Redis, the API, workers.

Each child runs in its own process group, so vLLM's engine processes go down with the worker that spawned them, and
is stopped on the way out (SIGTERM, then SIGKILL), also on an error or Ctrl-C. Only groups started here are signalled.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from redis import Redis
from redis.exceptions import RedisError

from juiz.runtime.errors import StartError

STOP_GRACE_S = 20


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def check(self) -> None:
        """Raise StartError, with the end of its log, if this child has exited."""
        if self.process.poll() is not None:
            raise StartError(f"{self.name} exited with {self.process.returncode}; its log:\n{tail(self.log)}")

    def cpu_seconds(self) -> float:
        """User + system CPU time this child's own process has used so far (Linux /proc)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def child(name: str, command: Sequence[str], env: dict[str, str], log: Path) -> Iterator[Child]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield Child(name, process, log)
        finally:
            stop(process)


@contextmanager
def stopped_on_sigterm() -> Iterator[None]:
    """A SIGTERM to this process unwinds it like Ctrl-C, so the `child` contexts stop their groups on the way out:
    Python's default SIGTERM ends the process at once, leaving its children (a worker holding the judge) running."""

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set a handler
        yield
        return
    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the child's process group, SIGKILL if it lingers, or at once when this process is interrupted again
    while it waits (a second Ctrl-C or a SIGTERM): a worker finishing its job must not outlive the command."""
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
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            raise


def wait_until(ready: Callable[[], bool], timeout_s: float, children: Sequence[Child], what: str) -> None:
    """Poll `ready` until it holds; fail early, with its log, when a child dies meanwhile."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        for c in children:
            c.check()
        if time.monotonic() > deadline:
            raise StartError(f"{what} not ready after {timeout_s:.0f}s")
        time.sleep(0.5)


def redis_pings(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=1).ping())
    except RedisError:
        return False


@contextmanager
def private_redis(workdir: Path, env: dict[str, str]) -> Iterator[tuple[str, Child]]:
    """A redis-server of our own on a free loopback port, nothing persisted; its URL and process."""
    server = shutil.which("redis-server")
    if server is None:
        raise StartError("redis-server is not installed (apt-get install redis-server, or `make system-deps`)")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    args = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    with child("redis-server", [*args, "--dir", str(workdir)], env, workdir / "redis.log") as redis:
        wait_until(lambda: redis_pings(url), 15, [redis], "redis-server")
        yield url, redis
