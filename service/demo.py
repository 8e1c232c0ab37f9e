"""`juiz demo` (`make demo`): the whole service on this machine, grading the seeds' triples over HTTP.

    Redis (a private redis-server when none answers at JUIZ_REDIS_URL) → the API (`juiz serve`) → one real worker
    (`juiz worker`, vLLM on JUIZ_MODEL, default qwen2.5-coder-1.5b-instruct) → submit the seeds with juiz.client →
    progress → scores, automated vs manual labels → the agreement report the API computed → seconds end to end

Everything it starts it stops at the end, also on Ctrl-C or an error. The queues get names of their own, so a
shared Redis (and any worker already listening on it) is left alone.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from redis import Redis
from redis.exceptions import RedisError

from juiz.agreement import format_agreement
from juiz.client import JuizClient
from juiz.errors import JuizError
from juiz.readers import read_triples
from juiz.settings import Settings
from schemas import BatchView, Judgement, Triple

SEEDS = Path(__file__).resolve().parent.parent / "examples" / "seeds"
READY_TIMEOUT_S = 1800  # a first start compiles and loads the model: minutes on CPU
STOP_GRACE_S = 20


class DemoError(JuizError):
    """A part of the demo did not start or stopped early; the message says which and where its log is."""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def redis_at(url: str, workdir: Path, out: TextIO) -> Iterator[str]:
    """The Redis at `url` when it answers; otherwise a private redis-server on a free port, stopped afterwards."""
    try:
        Redis.from_url(url, socket_connect_timeout=1).ping()
    except RedisError:
        pass
    else:
        print(f"Redis: using {url}", file=out)
        yield url
        return
    server = shutil.which("redis-server")
    if server is None:
        raise DemoError(f"no Redis answers at {url} and redis-server is not installed (apt-get install redis-server)")
    port = free_port()
    private = f"redis://127.0.0.1:{port}/0"
    args = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    with child("redis-server", [*args, "--dir", str(workdir)], dict(os.environ), workdir / "redis.log") as server_child:
        _wait(lambda: _pings(private), 10, [server_child], "redis-server")
        print(f"Redis: none at {url}; started a private redis-server at {private}", file=out)
        yield private


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path


@contextmanager
def child(name: str, command: Sequence[str], env: dict[str, str], log: Path) -> Iterator[Child]:
    """A subprocess in its own process group (so vLLM's engine process goes with it), stopped on the way out."""
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            yield Child(name, process, log)
        finally:
            _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
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


def _pings(url: str) -> bool:
    try:
        return bool(Redis.from_url(url, socket_connect_timeout=1).ping())
    except RedisError:
        return False


def _wait(ready: Callable[[], bool], timeout_s: float, children: Sequence[Child], what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        for c in children:
            if c.process.poll() is not None:
                code = c.process.returncode
                raise DemoError(f"{c.name} exited with {code} while waiting for {what}; its log:\n{_tail(c.log)}")
        if time.monotonic() > deadline:
            raise DemoError(f"{what} not ready after {timeout_s:.0f}s")
        time.sleep(0.5)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _progress(out: TextIO) -> Callable[[BatchView], None]:
    state: dict[str, str | None] = {"last": None}
    started = time.perf_counter()

    def show(view: BatchView) -> None:
        counts = view.counts
        line = (
            f"  {view.status.value:9} {counts.done}/{counts.total} graded "
            f"(ok {counts.ok}, parse_error {counts.parse_error}, failed {counts.failed})"
        )
        if line != state["last"]:
            print(f"{line}  [{time.perf_counter() - started:.1f}s]", file=out, flush=True)
            state["last"] = line

    return show


def _fmt(value: object, spec: str = "") -> str:
    if value is None:
        return "-"
    return format(value, spec) if spec else str(value)


def results_table(judgements: Sequence[Judgement]) -> str:
    rows = [f"{'id':8} {'status':11} {'score':>5} {'norm':>5} {'E[score]':>8}  {'automated':9} {'manual':6}"]
    for j in judgements:
        rows.append(
            f"{j.id[:8]:8} {j.status.value:11} {_fmt(j.score):>5} {_fmt(j.normalized_score, '.2f'):>5} "
            f"{_fmt(j.expected_score, '.2f'):>8}  {_fmt(j.automated_label):9} {_fmt(j.manual_label):6}"
        )
    return "\n".join(rows)


def run_demo(seeds_dir: Path = SEEDS, out: TextIO = sys.stdout) -> int:
    started = time.perf_counter()
    settings = Settings.from_env()
    files = sorted(seeds_dir.glob("00*.txt"))
    if not files:
        raise DemoError(f"no seed reports (00*.txt) in {seeds_dir}")
    triples: list[Triple] = [t for path in files for t in read_triples(path)]

    with ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="juiz-demo-"))  # kept: the logs of what ran
        redis_url = stack.enter_context(redis_at(settings.redis_url, workdir, out))
        name, key, port = f"juiz-demo-{secrets.token_hex(3)}", secrets.token_urlsafe(16), free_port()
        env = {
            **os.environ,
            "JUIZ_REDIS_URL": redis_url,
            "JUIZ_QUEUE": name,
            "JUIZ_PRIORITY_QUEUE": f"{name}-priority",
            "JUIZ_API_KEYS": f"demo:{key}",
            "JUIZ_MODEL": settings.model,
        }
        juiz = [sys.executable, "-m", "juiz.cli"]
        api = stack.enter_context(child("API", [*juiz, "serve", "--port", str(port)], env, workdir / "api.log"))
        worker = stack.enter_context(child("worker", [*juiz, "-v", "worker"], env, workdir / "worker.log"))
        client = stack.enter_context(JuizClient(f"http://127.0.0.1:{port}", api_key=key, timeout_s=600))
        print(f"API: http://127.0.0.1:{port} (OpenAPI UI at /schema); worker loading {settings.model} …", file=out)
        print(f"logs: {workdir}", file=out)

        def ready() -> bool:
            try:
                return client.ready().ready
            except Exception:
                return False

        _wait(ready, READY_TIMEOUT_S, [api, worker], "the API and a worker")
        print(f"ready after {time.perf_counter() - started:.1f}s", file=out)

        submitted = time.perf_counter()
        batch = client.submit(triples)
        print(f"submitted {len(triples)} triples from {len(files)} seed reports as batch {batch.id}", file=out)
        final = client.wait(batch.id, poll_s=0.5, on_progress=_progress(out))
        graded_s = time.perf_counter() - submitted
        order = {t.id: n for n, t in enumerate(triples)}
        judgements = sorted(client.results(batch.id), key=lambda j: order.get(j.id, len(order)))
        print("", results_table(judgements), "", sep="\n", file=out)
        print(format_agreement(client.agreement(batch.id)), file=out)
        print(
            f"\n{final.counts.done} graded ({final.status.value}) in {graded_s:.1f}s after submission; "
            f"{time.perf_counter() - started:.1f}s end to end, start-up included",
            file=out,
        )
    return 0 if final.status.value == "done" else 1
