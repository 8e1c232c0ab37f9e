"""A private service for the documentation's HTTP examples: a redis-server, `juiz serve` and the FAKE worker, each a
child process, stopped at the end of the session (as tests/browser does)."""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from collections.abc import Iterator

import httpx
import pytest

from juiz.runtime.processes import child, free_port, private_redis, wait_until
from tests.docs.blocks import REPO


@pytest.fixture(scope="session")
def docs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make system-deps)")
    workdir = tmp_path_factory.mktemp("docs-stack")
    key, port, queue = secrets.token_urlsafe(16), free_port(), f"juiz-docs-{secrets.token_hex(3)}"
    with private_redis(workdir, dict(os.environ)) as (redis_url, _):
        env = {
            **os.environ,
            "JUIZ_REDIS_URL": redis_url,
            "JUIZ_QUEUE": queue,
            "JUIZ_PRIORITY_QUEUE": f"{queue}-priority",
            "JUIZ_API_KEYS": f"docs:{key}",
            "JUIZ_MODEL": "fake-engine",
            "JUIZ_LOG_LEVEL": "WARNING",
            "PYTHONPATH": str(REPO),
        }
        api_cmd = [sys.executable, "-m", "juiz_cli", "serve", "--port", str(port)]
        worker_cmd = [sys.executable, "-m", "bench.fake_worker"]
        with (
            child("API", api_cmd, env, workdir / "api.log") as api,
            child("FAKE worker", worker_cmd, env, workdir / "worker.log") as worker,
        ):
            url = f"http://127.0.0.1:{port}"

            def ready() -> bool:
                try:
                    return httpx.get(f"{url}/ready", timeout=2).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_until(ready, 120, [api, worker], "the API and the FAKE worker")
            yield {"url": url, "key": key}
