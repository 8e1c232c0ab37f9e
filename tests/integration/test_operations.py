"""POST /v1/grade, /health, /ready, /metrics, and the Python client against the API."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis
from rq import Queue

from bench.fake_worker import FakeWorkerEngine
from juiz.clients import ApiError, JuizClient
from juiz.runtime.settings import Settings
from schemas import BatchView
from tests.integration.helpers import METRICS_HEADERS, make_settings, triples
from workers.worker import build_worker

MakeClient = Callable[[Settings], TestClient[Litestar]]


def wait_for_job(redis: Redis, queue: str, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not Queue(queue, connection=redis).count:
        assert time.monotonic() < deadline, f"nothing was queued on {queue}"
        time.sleep(0.01)


def test_grade_answers_synchronously_when_a_worker_is_there(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    # A batch waits in the normal queue: the priority queue must be served first, alone.
    client.post("/v1/batches", json={"items": triples(4, start=100)})
    answer: dict[str, Any] = {}

    def call() -> None:
        answer["response"] = client.post("/v1/grade", json={"item": triples(1, start=7)[0], "options": {"mode": "cot"}})

    caller = threading.Thread(target=call)
    caller.start()
    wait_for_job(redis, settings.priority_queue)
    run_worker(settings, max_jobs=1)
    caller.join(timeout=10)

    response = answer["response"]
    assert response.status_code == 200, response.text
    judgement = response.json()
    assert judgement["id"] == "t7" and judgement["status"] == "ok" and judgement["score"] == 3
    assert Queue(settings.queue, connection=redis).count == 1  # the batch's job is still waiting


def test_grade_times_out_into_a_batch(make_client: MakeClient, redis_url: str, run_worker: Any) -> None:
    settings = make_settings(redis_url, grade_timeout_s=0.2)
    client = make_client(settings)
    response = client.post("/v1/grade", json={"item": triples(1)[0]})
    assert response.status_code == 202
    batch = response.json()
    assert response.headers["location"] == batch["links"]["self"] and batch["status"] == "queued"

    run_worker(settings)
    (result,) = client.get(batch["links"]["results"]).json()["items"]
    assert result["id"] == "t0" and result["status"] == "ok"


def test_grade_names_the_bad_field(client: TestClient[Litestar]) -> None:
    response = client.post("/v1/grade", json={"item": {"question": "q?"}})
    assert response.status_code == 422 and response.json()["field"] == "item.answer"


def test_ready_needs_redis_and_a_live_worker(
    client: TestClient[Litestar], settings: Settings, redis: Redis, engine: FakeWorkerEngine
) -> None:
    assert client.get("/health").json()["status"] == "ok"
    not_ready = client.get("/ready", headers=METRICS_HEADERS)
    assert not_ready.status_code == 503
    assert not_ready.json() == {
        "ready": False,
        "redis": True,
        "writable": True,
        "workers": [],
        "reason": "no live worker on the queues",
    }

    worker = build_worker(settings, redis, engine, name="w-test")
    worker.register_birth()
    try:
        ready = client.get("/ready", headers=METRICS_HEADERS)
        assert ready.status_code == 200
        (view,) = ready.json()["workers"]
        assert view["name"] == "w-test" and view["model"] == "fake-engine"
        assert view["queues"] == [settings.priority_queue, settings.queue]
    finally:
        worker.register_death()


def test_metrics_report_queues_items_latency_and_workers(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any, engine: FakeWorkerEngine
) -> None:
    client.post("/v1/batches", json={"items": triples(5)})
    before = client.get("/metrics", headers=METRICS_HEADERS)
    assert before.headers["content-type"].startswith("text/plain")
    assert f'juiz_queue_jobs{{queue="{settings.queue}"}} 2.0' in before.text

    run_worker(settings)
    worker = build_worker(settings, redis, engine, name="w-metrics")
    worker.register_birth()
    try:
        text = client.get("/metrics", headers=METRICS_HEADERS).text
    finally:
        worker.register_death()
    assert f'juiz_queue_jobs{{queue="{settings.queue}"}} 0.0' in text
    assert 'juiz_items_graded_total{status="ok"} 5.0' in text
    assert 'juiz_items_graded_total{status="failed"} 0.0' in text
    assert "juiz_engine_calls_total 2.0" in text
    assert 'juiz_engine_call_seconds_bucket{le="+Inf"} 2.0' in text
    assert 'juiz_item_seconds_bucket{le="+Inf"} 5.0' in text
    assert "juiz_judgements_per_second 0.08" in text  # 5 items in the last minute
    assert "juiz_workers 1.0" in text
    assert re.search(r'juiz_worker_info\{model="fake-engine",state="[^"]*",worker="w-metrics"\} 1.0', text)


def test_openapi_schema_documents_every_handler(client: TestClient[Litestar]) -> None:
    schema = client.get("/schema/openapi.json").json()
    operations = {op["operationId"] for path in schema["paths"].values() for op in path.values()}
    assert {
        "createBatch",
        "getBatch",
        "listBatchResults",
        "getBatchAgreement",
        "getBatchReport",
        "cancelBatch",
    } <= operations
    assert {"gradeOne", "health", "ready", "metrics"} <= operations
    assert "application/x-ndjson" in schema["paths"]["/v1/batches"]["post"]["requestBody"]["content"]
    assert client.get("/schema").status_code == 200  # the browsable UI


def test_python_client_round_trip(make_client: MakeClient, redis_url: str, settings: Settings, run_worker: Any) -> None:
    http = make_client(make_settings(redis_url, api_keys="team:secret"))
    juiz = JuizClient(api_key="secret", http=http)
    batch = juiz.submit(triples(3), {"lang": "en"}, idempotency_key="same")
    assert juiz.submit(triples(3), {"lang": "en"}, idempotency_key="same").id == batch.id
    run_worker(settings)
    seen: list[BatchView] = []
    done = juiz.wait(batch.id, poll_s=0.01, on_progress=seen.append)
    assert done.status == "done" and seen[-1].counts.ok == 3
    results = list(juiz.results(batch.id, page_size=2))
    assert sorted(r.id for r in results) == ["t0", "t1", "t2"]
    assert [r.id for r in juiz.stream_results(batch.id)] == [r.id for r in results]
    assert juiz.agreement(batch.id, resamples=10).n == 3
    assert "**Question" in juiz.report(batch.id)  # lang en: English headings

    with pytest.raises(ApiError) as error:
        JuizClient(api_key="wrong", http=http).batch(batch.id)
    assert error.value.status_code == 401 and error.value.body["field"] == "Authorization"

    impatient = make_client(make_settings(redis_url, grade_timeout_s=0.1, api_keys="team:secret"))
    pending = JuizClient(api_key="secret", http=impatient).grade(triples(1)[0])
    assert isinstance(pending, BatchView) and pending.counts.total == 1
