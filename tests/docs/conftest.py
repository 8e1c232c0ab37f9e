"""A private service for the documentation's HTTP examples: a redis-server, `juiz serve` and the FAKE worker, each a
child process, stopped at the end of the session (as tests/browser does)."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Iterator

import pytest

from juiz.runtime.processes import private_redis
from tests.fake_stack import fake_stack


@pytest.fixture(scope="session")
def docs_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (make system-deps)")
    workdir = tmp_path_factory.mktemp("docs-stack")
    key = secrets.token_urlsafe(16)
    with (
        private_redis(workdir, dict(os.environ)) as (redis_url, _),
        fake_stack(workdir, "docs", redis_url, f"docs:{key}", {}) as url,
    ):
        yield {"url": url, "key": key}
