"""The API under uvicorn (`juiz serve`) and the FAKE worker (bench/fake_worker.py) on a Redis the caller started, each
a child process stopped on the way out: the real stack the browser tests and the documentation's HTTP examples run
against."""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx

from juiz.runtime.processes import child, free_port, wait_until
from tests.conftest import REPO


@contextmanager
def fake_stack(workdir: Path, name: str, redis_url: str, api_keys: str, env: Mapping[str, str]) -> Iterator[str]:
    """The stack's URL once /ready answers 200. `name` makes its queues its own; `api_keys` is JUIZ_API_KEYS; `env`
    adds to (or overrides) the children's environment."""
    port, queue = free_port(), f"juiz-{name}-{secrets.token_hex(3)}"
    children_env = {
        **os.environ,
        "JUIZ_REDIS_URL": redis_url,
        "JUIZ_QUEUE": queue,
        "JUIZ_PRIORITY_QUEUE": f"{queue}-priority",
        "JUIZ_API_KEYS": api_keys,
        "JUIZ_MODEL": "fake-engine",
        "JUIZ_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(REPO),
        **env,
    }
    api_cmd = [sys.executable, "-m", "juiz_cli", "serve", "--port", str(port)]
    worker_cmd = [sys.executable, "-m", "bench.fake_worker"]
    with (
        child("API", api_cmd, children_env, workdir / "api.log") as api,
        child("FAKE worker", worker_cmd, children_env, workdir / "worker.log") as worker,
    ):
        url = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            try:
                return httpx.get(f"{url}/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, 120, [api, worker], "the API and the FAKE worker")
        yield url
