"""Malformed and hostile requests get a 4xx naming the field, never a 5xx and never a stored batch; the docs pages load
nothing from outside juiz; rate limits; /agreement's bounded, cached cost; the OpenAPI document."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis
from rq.job import JobStatus
from rq.queue import Queue
from rq.serializers import JSONSerializer

from juiz.runtime.errors import InputError
from juiz.runtime.settings import Settings
from service.agreement import cache_key, capped_resamples
from service.server import check_not_open
from tests.integration.helpers import METRICS_HEADERS, juiz_keys, make_settings, queued_jobs, triples

MakeClient = Callable[[Settings], TestClient[Litestar]]
NDJSON = {"Accept": "application/x-ndjson"}


def submit(client: TestClient[Litestar], items: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    response = client.post("/v1/batches", json={"items": items, "options": options})
    assert response.status_code == 202, response.text
    return dict(response.json())


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_malformed_cursors_and_batch_ids_are_4xx(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    created = submit(client, triples(3))
    run_worker(settings)
    results = created["links"]["results"]
    for cursor in ("²", "9" * 24, "-1", "1e3"):
        for headers in ({}, NDJSON):
            response = client.get(results, params={"cursor": cursor}, headers=headers)
            assert 400 <= response.status_code < 500, (cursor, headers, response.status_code)
            assert response.json()["field"] == "cursor"
    # A cursor past the end is a valid, empty page (the batch is over): no cut stream, no error.
    assert client.get(results, params={"cursor": "9" * 15}).json() == {"items": [], "next_cursor": None}
    assert client.get(results, params={"cursor": "9" * 15}, headers=NDJSON).text == ""

    batch_id = created["id"]
    for bad in (f"{batch_id}:items", f"{batch_id}:results", batch_id.upper(), "x" * 32, "1"):
        for suffix in ("", "/results", "/agreement", "/report"):
            response = client.get(f"/v1/batches/{bad}{suffix}")
            assert 400 <= response.status_code < 500, (bad, suffix, response.status_code)
            assert response.json()["field"] == "batch_id"
        assert client.delete(f"/v1/batches/{bad}").status_code == 422
    assert client.get(f"/v1/batches/{'0' * 32}").status_code == 404


def test_deep_json_is_refused_before_anything_is_stored(
    client: TestClient[Litestar], settings: Settings, redis: Redis
) -> None:
    item = triples(2)
    deep_in_item = (
        '{"items": [' + json.dumps(item[0]) + ', {"question": "q?", "answer": "a", "meta": ' + nested(900) + "}]}"
    )
    response = client.post("/v1/batches", content=deep_in_item, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["index"] == 1 and response.json()["field"] == "meta"
    assert "max_json_depth" in response.json()["detail"]

    for body in (nested(100_000), '{"items": ' + nested(100_000) + "}"):
        response = client.post("/v1/batches", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 422, response.text

    jsonl = json.dumps(item[0]) + "\n" + '{"question": "q?", "answer": "a", "meta": ' + nested(900) + "}\n"
    response = client.post("/v1/batches", content=jsonl, headers={"Content-Type": "application/x-ndjson"})
    assert response.status_code == 422 and response.json()["line"] == 2, response.text
    deep_options = {"item": item[0], "options": {"label_mapping": json.loads(nested(200))}}
    assert client.post("/v1/grade", json=deep_options).status_code == 422
    assert juiz_keys(redis) == [] and queued_jobs(redis, settings) == 0


def test_wrong_content_type_is_415(client: TestClient[Litestar], settings: Settings, redis: Redis) -> None:
    body = json.dumps({"items": triples(1)})
    for route in ("/v1/batches", "/v1/grade"):
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
            response = client.post(route, content=body, headers={"Content-Type": content_type})
            assert response.status_code == 415, (route, content_type, response.text)
            assert response.json()["field"] == "Content-Type"
    assert juiz_keys(redis) == [] and queued_jobs(redis, settings) == 0
    # JSON with a charset, and no Content-Type at all, are still read as JSON.
    ok = client.post("/v1/batches", content=body, headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 202


def test_unknown_option_names_are_422_naming_the_field(client: TestClient[Litestar], redis: Redis) -> None:
    response = client.post("/v1/batches", json={"items": triples(1), "options": {"mdoe": "fast"}})
    assert response.status_code == 422 and response.json()["field"] == "options.mdoe", response.text
    response = client.post("/v1/grade", json={"item": triples(1)[0], "options": {"mdoe": "fast"}})
    assert response.status_code == 422 and response.json()["field"] == "options.mdoe", response.text
    assert juiz_keys(redis) == []


def test_over_long_fields_are_422_naming_item_and_field(make_client: MakeClient, redis_url: str, redis: Redis) -> None:
    settings = make_settings(redis_url, max_body_bytes=16 * 2**20)
    client = make_client(settings)
    items = triples(3)
    items[2]["answer"] = "x" * (5 * 2**20)  # 5 MB
    response = client.post("/v1/batches", json={"items": items})
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["index"] == 2 and error["field"] == "answer" and "max_answer_chars" in error["detail"]

    for field, setting in (("question", "max_question_chars"), ("context", "max_context_chars")):
        item = triples(1)[0]
        item[field] = "y" * (getattr(settings, setting) + 1)
        response = client.post("/v1/batches", json={"items": [item]})
        assert response.status_code == 422 and response.json()["field"] == field, response.text
    segments = [{"text": "z" * (settings.max_context_chars // 2 + 1)} for _ in range(2)]  # too long together
    response = client.post("/v1/batches", json={"items": [{**triples(1)[0], "context": segments}]})
    assert response.status_code == 422 and response.json()["field"] == "context"
    response = client.post("/v1/grade", json={"item": {**triples(1)[0], "answer": "x" * 20_000}})
    assert response.status_code == 422 and response.json()["field"] == "item.answer", response.text
    jsonl = json.dumps(triples(1)[0]) + "\n" + json.dumps({**triples(1)[0], "answer": "x" * 20_000}) + "\n"
    response = client.post("/v1/batches", content=jsonl, headers={"Content-Type": "application/x-ndjson"})
    assert response.status_code == 422 and response.json()["line"] == 2 and response.json()["field"] == "answer"
    assert juiz_keys(redis) == []

    roomy = make_client(make_settings(redis_url, max_answer_chars=30_000))  # the limits are settings
    assert roomy.post("/v1/batches", json={"items": [{**triples(1)[0], "answer": "x" * 20_000}]}).status_code == 202


def test_docs_pages_load_only_what_juiz_serves(client: TestClient[Litestar]) -> None:
    for page in ("/schema", "/schema/swagger"):
        response = client.get(page)
        assert response.status_code == 200 and "text/html" in response.headers["content-type"]
        urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", response.text)
        assert urls, response.text
        for url in urls:
            assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from outside juiz"
            asset = client.get(url)
            assert asset.status_code == 200 and asset.content, url
        assert "SwaggerUIBundle(" in response.text  # the OpenAPI document is inlined in the page
    assert client.get("/schema/openapi.json").status_code == 200


@pytest.mark.usefixtures("one_rate_window")
def test_rate_limit_per_tenant_answers_429_with_retry_after(make_client: MakeClient, redis_url: str) -> None:
    settings = make_settings(redis_url, rate_limit_per_minute=3, api_keys="alice:key-a,bob:key-b")
    client = make_client(settings)
    alice, bob = {"Authorization": "Bearer key-a"}, {"Authorization": "Bearer key-b"}
    missing = f"/v1/batches/{'0' * 32}"
    assert [client.get(missing, headers=alice).status_code for _ in range(3)] == [404, 404, 404]
    limited = client.get(missing, headers=alice)
    assert limited.status_code == 429 and limited.json()["status_code"] == 429
    assert 1 <= int(limited.headers["Retry-After"]) <= 61
    assert client.get(missing, headers=bob).status_code == 404  # another tenant has its own budget
    assert client.get("/health").status_code == 200  # operations endpoints are not limited


def test_agreement_is_capped_and_cached_once_the_batch_is_over(
    make_client: MakeClient, redis_url: str, redis: Redis, run_worker: Any
) -> None:
    settings = make_settings(redis_url, agreement_max_work=50)
    client = make_client(settings)
    created = submit(client, triples(10))
    run_worker(settings)
    assert client.get(created["links"]["self"]).json()["status"] == "done"
    report = client.get(created["links"]["agreement"], params={"resamples": 1000}).json()
    assert report["n"] == 10 and report["bootstrap"]["resamples"] == 5  # 50 // 10 items
    assert capped_resamples(1000, 10, 50) == 5 and capped_resamples(3, 10, 50) == 3
    key = cache_key(created["id"], 1000)
    assert redis.exists(key)
    redis.set(key, json.dumps({**report, "n_excluded": {"marker": 1}}))  # the cached copy is what is served
    again = client.get(created["links"]["agreement"], params={"resamples": 1000}).json()
    assert again["n_excluded"] == {"marker": 1}


def test_openapi_documents_statuses_security_and_bodies(client: TestClient[Litestar]) -> None:
    schema = client.get("/schema/openapi.json").json()
    assert schema["components"]["securitySchemes"]["BearerKey"] == {
        "type": "http",
        "scheme": "bearer",
        "description": schema["components"]["securitySchemes"]["BearerKey"]["description"],
    }
    paths = schema["paths"]
    create = paths["/v1/batches"]["post"]
    assert {"202", "401", "409", "413", "415", "422", "429", "503"} <= set(create["responses"])
    assert create["security"] == [{"BearerKey": []}]
    assert set(create["requestBody"]["content"]) == {"application/json", "application/x-ndjson"}
    grade = paths["/v1/grade"]["post"]
    assert "201" not in grade["responses"] and {"200", "202", "401", "415", "422"} <= set(grade["responses"])
    assert "requestBody" in grade
    for path in ("/v1/batches/{batch_id}", "/v1/batches/{batch_id}/results"):
        assert {"401", "404", "429"} <= set(paths[path]["get"]["responses"])
    assert "security" not in paths["/health"]["get"]
    triple = schema["components"]["schemas"]["Triple"]
    assert triple["properties"]["question"]["type"] == "string" and "question" in triple["required"]
    assert triple["properties"]["answer"]["maxLength"] == make_settings("redis://unused").max_answer_chars
    assert schema["components"]["schemas"]["BatchSubmission"]["additionalProperties"] is False


def test_workers_run_only_juiz_job_functions(redis: Redis, settings: Settings, run_worker: Any, tmp_path: Any) -> None:
    """Whoever can write to Redis can enqueue a job naming any function; the worker refuses it without importing it."""
    marker = tmp_path / "ran"
    queue = Queue(settings.queue, connection=redis, serializer=JSONSerializer)
    job = queue.enqueue("os.system", f"touch {marker}")
    run_worker(settings)
    assert not marker.exists()
    assert job.get_status(refresh=True) == JobStatus.FAILED and job.id in queue.failed_job_registry


def test_metrics_add_per_route_http_figures_without_batch_ids(client: TestClient[Litestar]) -> None:
    client.get(f"/v1/batches/{'0' * 32}")
    metrics = client.get("/metrics", headers=METRICS_HEADERS).text
    assert "juiz_queue_jobs" in metrics  # the cluster-wide figures from Redis stay
    route = 'path="/v1/batches/{batch_id}",status_code="404"'
    assert any(line.startswith("juiz_http_requests_total") and route in line for line in metrics.splitlines())
    assert "0" * 32 not in metrics


def test_serve_refuses_an_open_api_on_the_network(redis_url: str) -> None:
    open_settings = make_settings(redis_url)
    for host in ("0.0.0.0", "10.1.2.3", "::", "api.example"):
        with pytest.raises(InputError, match="JUIZ_API_KEYS"):
            check_not_open(open_settings, host)
    for host in ("127.0.0.1", "::1", "localhost"):
        check_not_open(open_settings, host)  # a laptop or a test may run open
    check_not_open(make_settings(redis_url, api_keys="team:k"), "0.0.0.0")
    check_not_open(make_settings(redis_url, allow_open_api=True), "0.0.0.0")
