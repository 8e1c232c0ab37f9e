"""The web page while Redis is away (a private redis-server, shut down and started again): every page route answers
an HTML page with the API's message (never the API's JSON), and a label posted once Redis is back is stored. The
page's own keeping of a label through the outage is a browser test (tests/browser/test_team_browser.py)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from bench.fake_worker import FakeWorkerEngine
from juiz.runtime.settings import Settings
from service.app import create_app
from tests.integration.helpers import AofRedis, make_settings, triples
from tests.integration.test_ui import csrf_of, submit
from workers import jobs
from workers.worker import build_worker


@pytest.fixture
def stack(aof_redis: AofRedis) -> Iterator[tuple[AofRedis, Settings, Redis, TestClient[Litestar]]]:
    settings = make_settings(aof_redis.url)
    redis = Redis.from_url(aof_redis.url, socket_timeout=2, socket_connect_timeout=1)
    with TestClient(create_app(settings, redis)) as client:
        yield aof_redis, settings, redis, client


def grade(settings: Settings, redis: Redis, engine: FakeWorkerEngine) -> None:
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    try:
        build_worker(settings, redis, engine).work(burst=True, logging_level="WARNING")
    finally:
        jobs.unbind()
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])


def test_every_page_answers_html_while_redis_is_away_and_a_label_is_stored_once_it_is_back(
    stack: tuple[AofRedis, Settings, Redis, TestClient[Litestar]], engine: Any
) -> None:
    server, settings, redis, client = stack
    batch_id = submit(client, "", triples(3, label=None))
    grade(settings, redis, engine)
    page = client.get(f"/ui/batches/{batch_id}/items/1")
    csrf = csrf_of(page.text)
    server.shutdown()
    try:
        for method, path, data in [
            ("GET", "/ui/batches", None),
            ("GET", f"/ui/batches/{batch_id}", None),
            ("GET", f"/ui/batches/{batch_id}/items/1", None),
            ("GET", f"/ui/batches/{batch_id}/progress", None),
            ("POST", f"/ui/batches/{batch_id}/items/1/label", {"_csrf_token": csrf, "manual_label": "P"}),
        ]:
            response = client.request(method, path, data=data, follow_redirects=False)
            assert response.status_code == 503, (path, response.status_code, response.text[:200])
            assert response.headers["content-type"].startswith("text/html"), path
            assert "Redis" in response.text and "unreachable" in response.text and "{" not in response.text[:1]
            assert response.headers["retry-after"]
    finally:
        server.start()
    saved = client.post(f"/ui/batches/{batch_id}/items/1/label", data={"_csrf_token": csrf, "manual_label": "P"})
    assert saved.status_code == 200 and 'data-testid="manual-label">P' in saved.text


def test_an_open_batch_page_over_or_not_keeps_asking_the_store(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    batch_id = submit(client, "", triples(2))
    run_worker(settings)
    page = client.get(f"/ui/batches/{batch_id}").text
    # polled while open, over or not: how the page learns the store went away (ui.js shows #store-down)
    assert f'data-progress-url="/ui/batches/{batch_id}/progress"' in page
    assert "store-down" in client.get("/ui/static/ui.js").text
