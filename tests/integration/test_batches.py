"""Batches through the HTTP API, graded by a real RQ worker (burst mode) on a FAKE engine."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from bench.fake_worker import GRADED_KEY, FakeWorkerEngine, fake_reply
from juiz.engines.fake import FakeEngine
from juiz.runtime.settings import Settings
from tests.integration.helpers import METRICS_HEADERS, juiz_keys, make_settings, queued_jobs, triples

# Tests counting engine calls pin the CoT prompt: one conversation per item in one call. The default (check-based) asks
# several yes/no questions per item in two waves (juiz.judging.checks); the fake worker answers both.
COT = {"prompt": "answer_relevance@juiz-1"}

MakeClient = Callable[[Settings], TestClient[Litestar]]


def submit(client: TestClient[Litestar], items: list[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    response = client.post("/v1/batches", json={"items": items, "options": kwargs.pop("options", {})}, **kwargs)
    assert response.status_code == 202, response.text
    return dict(response.json())


def graded_counts(redis: Redis) -> dict[str, int]:
    return {k.decode(): int(v) for k, v in redis.hgetall(GRADED_KEY).items()}


def test_a_batch_is_graded_and_reported(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    created = submit(client, triples(10))
    assert created["status"] == "queued"
    assert created["counts"] == {"total": 10, "done": 0, "ok": 0, "parse_error": 0, "failed": 0}
    assert created["links"]["results"] == f"/v1/batches/{created['id']}/results"

    run_worker(settings)

    batch = client.get(created["links"]["self"]).json()
    assert batch["status"] == "done"
    assert batch["counts"] == {"total": 10, "done": 10, "ok": 10, "parse_error": 0, "failed": 0}
    assert batch["started_at"] and batch["finished_at"]
    assert batch["judgements_per_s"] > 0 and batch["eta_s"] == 0
    for part in ("", ":items", ":results", ":stored"):  # kept for the retention period, then gone
        assert 0 < redis.ttl(f"juiz:batch:{{{created['id']}}}{part}") <= settings.retention_s

    page = client.get(created["links"]["results"], params={"limit": 100}).json()
    assert page["next_cursor"] is None
    results = {r["id"]: r for r in page["items"]}
    assert set(results) == {f"t{i}" for i in range(10)}
    first = results["t3"]
    assert first["status"] == "ok" and first["score"] == 3 and first["normalized_score"] == 1.0
    assert first["automated_label"] == "C" and first["manual_label"] == "C"
    assert first["context"] == "Transcript about topic 3."
    assert first["provenance"]["model"] == "fake-engine"
    assert first["provenance"]["prompt"].startswith("answer_relevance@")

    report = client.get(created["links"]["report"])
    assert report.headers["content-type"].startswith("text/markdown")
    assert report.text.index("topic 0?") < report.text.index("topic 9?")  # input order, not completion order

    agreement = client.get(created["links"]["agreement"], params={"resamples": 50}).json()
    assert agreement["n"] == 10 and agreement["classes"] == ["I", "P", "C"]


def test_extra_fields_pass_through(client: TestClient[Litestar], settings: Settings, run_worker: Any) -> None:
    item = {**triples(1)[0], "course": "ML-101", "tags": ["a", "b"]}
    created = submit(client, [item])
    run_worker(settings)
    (result,) = client.get(created["links"]["results"]).json()["items"]
    assert result["course"] == "ML-101" and result["tags"] == ["a", "b"]


def test_jsonl_upload_with_options_in_the_query(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    body = "\n".join(json.dumps(t) for t in triples(3)) + "\n"
    response = client.post(
        "/v1/batches",
        content=body,
        headers={"Content-Type": "application/x-ndjson"},
        params={"mode": "cot", "lang": "en", "prompt": "answer_relevance@juiz-1"},
    )
    assert response.status_code == 202, response.text
    assert response.json()["options"]["lang"] == "en"
    run_worker(settings)
    items = client.get(f"/v1/batches/{response.json()['id']}/results").json()["items"]
    assert {r["provenance"]["prompt"] for r in items} == {"answer_relevance@juiz-1.en"}


def test_idempotency_key_gives_back_the_same_batch_graded_once(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    items = triples(6)
    first = client.post("/v1/batches", json={"items": items}, headers={"Idempotency-Key": "k-1"})
    again = client.post("/v1/batches", json={"items": items}, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert queued_jobs(redis, settings) == 2  # 6 items, chunks of 4: queued once

    other = client.post("/v1/batches", json={"items": triples(5)}, headers={"Idempotency-Key": "k-1"})
    assert other.status_code == 409
    assert other.json()["field"] == "Idempotency-Key"

    run_worker(settings)
    assert graded_counts(redis) == {str(i): 1 for i in range(6)}
    assert client.get(first.json()["links"]["self"]).json()["counts"]["done"] == 6


def test_limits_answer_413_naming_the_limit_and_store_nothing(
    make_client: MakeClient, redis_url: str, redis: Redis
) -> None:
    settings = make_settings(redis_url, max_items=5, max_body_bytes=4096)
    client = make_client(settings)

    too_many = client.post("/v1/batches", json={"items": triples(6)})
    assert too_many.status_code == 413
    assert too_many.json()["limit"] == "max_items" and too_many.json()["maximum"] == 5
    assert "max_items" in too_many.json()["detail"]

    jsonl = "\n".join(json.dumps(t) for t in triples(6))
    too_many_lines = client.post("/v1/batches", content=jsonl, headers={"Content-Type": "application/x-ndjson"})
    assert too_many_lines.status_code == 413 and too_many_lines.json()["limit"] == "max_items"

    big = [{**t, "answer": "x" * 2000} for t in triples(3)]
    too_big = client.post("/v1/batches", json={"items": big})
    assert too_big.status_code == 413
    assert too_big.json()["limit"] == "max_body_bytes" and too_big.json()["maximum"] == 4096

    assert juiz_keys(redis) == [] and queued_jobs(redis, settings) == 0


def test_invalid_item_answers_422_naming_index_and_field_and_stores_nothing(
    client: TestClient[Litestar], settings: Settings, redis: Redis
) -> None:
    items = triples(4)
    del items[2]["question"]
    response = client.post("/v1/batches", json={"items": items}, headers={"Idempotency-Key": "bad-1"})
    assert response.status_code == 422
    body = response.json()
    assert body["index"] == 2 and body["field"] == "question"
    assert "items[2].question" in body["detail"]

    items = triples(3)
    items[1]["context"] = [{"text": "ok"}, {"source": "no text"}]
    nested = client.post("/v1/batches", json={"items": items}).json()
    assert nested["index"] == 1 and nested["field"] == "context.1.text"

    lines = [json.dumps(t) for t in triples(3)]
    lines[1] = json.dumps({"question": "   ", "answer": "a"})
    jsonl = client.post("/v1/batches", content="\n".join(lines), headers={"Content-Type": "application/x-ndjson"})
    assert jsonl.status_code == 422 and jsonl.json()["line"] == 2 and jsonl.json()["field"] == "question"

    bad_lang = client.post("/v1/batches", json={"items": triples(1), "options": {"lang": "fr"}})
    assert bad_lang.status_code == 422 and bad_lang.json()["field"] == "options.lang"
    bad_prompt = client.post("/v1/batches", json={"items": triples(1), "options": {"prompt": "answer_relevance@nope"}})
    assert bad_prompt.status_code == 422 and bad_prompt.json()["field"] == "options.prompt"
    no_items = client.post("/v1/batches", json={"items": []})
    assert no_items.status_code == 422 and no_items.json()["field"] == "items"
    malformed = client.post("/v1/batches", content=b"{not json", headers={"Content-Type": "application/json"})
    assert malformed.status_code == 422 and malformed.json()["line"] == 1

    assert juiz_keys(redis) == [] and queued_jobs(redis, settings) == 0


def test_tenants_see_only_their_own_batches(make_client: MakeClient, redis_url: str) -> None:
    client = make_client(make_settings(redis_url, api_keys="alice:key-a,bob:key-b"))
    alice = {"Authorization": "Bearer key-a"}
    bob = {"Authorization": "Bearer key-b"}

    assert client.post("/v1/batches", json={"items": triples(1)}).status_code == 401
    wrong = client.post("/v1/batches", json={"items": triples(1)}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["field"] == "Authorization"

    created = client.post("/v1/batches", json={"items": triples(2)}, headers=alice).json()
    links = created["links"]
    assert client.get(links["self"], headers=alice).status_code == 200
    for url in (links["self"], links["results"], links["agreement"], links["report"]):
        response = client.get(url, headers=bob)
        assert response.status_code == 404, url
        assert response.json()["field"] == "batch_id"
    assert client.delete(links["self"], headers=bob).status_code == 404
    assert client.get(links["self"], headers=alice).json()["status"] == "queued"
    assert client.get("/health").status_code == 200  # operations endpoints need no key


def test_cancel_drops_queued_work_and_keeps_finished_results(
    client: TestClient[Litestar], settings: Settings, redis: Redis, run_worker: Any
) -> None:
    created = submit(client, triples(12))
    run_worker(settings, max_jobs=1)
    assert client.get(created["links"]["self"]).json()["status"] == "running"

    cancelled = client.delete(created["links"]["self"])
    assert cancelled.status_code == 200
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["cancelled_at"]
    assert queued_jobs(redis, settings) == 0

    run_worker(settings)
    batch = client.get(created["links"]["self"]).json()
    assert batch["status"] == "cancelled" and batch["counts"]["done"] == 4
    page = client.get(created["links"]["results"]).json()
    assert len(page["items"]) == 4 and page["next_cursor"] is None
    assert sum(graded_counts(redis).values()) == 4


def test_results_are_readable_while_the_batch_runs(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    created = submit(client, triples(8))
    run_worker(settings, max_jobs=1)

    assert client.get(created["links"]["self"]).json()["status"] == "running"
    page = client.get(created["links"]["results"]).json()
    assert len(page["items"]) == 4 and page["next_cursor"] == "4"  # more will come
    streamed = client.get(created["links"]["results"], headers={"Accept": "application/x-ndjson"})
    assert streamed.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in streamed.text.splitlines()]
    assert [r["id"] for r in lines] == [r["id"] for r in page["items"]]

    run_worker(settings)
    rest = client.get(created["links"]["results"], params={"cursor": page["next_cursor"]}).json()
    assert len(rest["items"]) == 4 and rest["next_cursor"] is None
    followed = client.get(
        created["links"]["results"], params={"follow": "true"}, headers={"Accept": "application/x-ndjson"}
    )
    assert len(followed.text.splitlines()) == 8


def test_cursor_paging_walks_every_result_once(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    created = submit(client, triples(11))
    run_worker(settings)
    seen: list[str] = []
    cursor: str | None = ""
    while cursor is not None:
        page = client.get(created["links"]["results"], params={"cursor": cursor, "limit": 3}).json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
    assert sorted(seen) == sorted(f"t{i}" for i in range(11)) and len(seen) == 11
    assert client.get(created["links"]["results"], params={"cursor": "x"}).json()["field"] == "cursor"
    too_small = client.get(created["links"]["results"], params={"limit": 0})  # Litestar's validation, answered 422
    assert too_small.status_code == 422 and too_small.json()["field"] == "limit"


def test_small_batches_share_one_engine_call(
    make_client: MakeClient, redis_url: str, run_worker: Any, engine: FakeWorkerEngine
) -> None:
    settings = make_settings(redis_url, coalesce_max_items=16)
    client = make_client(settings)
    ids = [submit(client, triples(2, start=10 * n), options=COT)["id"] for n in range(3)]
    run_worker(settings)
    assert engine.calls == [6]  # three 2-item batches from one job's call
    assert all(client.get(f"/v1/batches/{i}").json()["status"] == "done" for i in ids)


def test_identical_triples_reuse_the_cached_result(
    make_client: MakeClient, redis_url: str, redis: Redis, run_worker: Any, engine: FakeWorkerEngine
) -> None:
    settings = make_settings(redis_url)
    client = make_client(settings)
    first = submit(client, triples(3, prefix="a"), options=COT)
    run_worker(settings)
    second = submit(client, triples(3, prefix="b", label="I"), options=COT)
    run_worker(settings)
    assert sum(engine.calls) == 3  # the second batch came from the cache

    results = client.get(second["links"]["results"]).json()["items"]
    assert sorted(r["id"] for r in results) == ["b0", "b1", "b2"]
    assert {r["manual_label"] for r in results} == {"I"}
    original = {r["question"]: r for r in client.get(first["links"]["results"]).json()["items"]}
    for result in results:
        assert result["score"] == original[result["question"]]["score"]
        assert result["provenance"] == original[result["question"]]["provenance"]
    assert "juiz_cache_hits_total 3.0" in client.get("/metrics", headers=METRICS_HEADERS).text

    uncached = make_settings(redis_url, result_cache=False)
    third = submit(make_client(uncached), triples(3, prefix="c"), options=COT)
    run_worker(uncached)
    assert sum(engine.calls) == 6
    assert client.get(third["links"]["self"]).json()["status"] == "done"


def test_a_cached_result_is_reused_only_by_an_engine_of_the_same_dtype(
    make_client: MakeClient, redis_url: str, run_worker: Any
) -> None:
    """The same model in float32 and in bfloat16 grades differently: a bf16 worker grades afresh what a float32 worker
    cached, and another float32 worker reuses it."""
    settings = make_settings(redis_url)
    client = make_client(settings)
    float32 = FakeEngine(fake_reply, "fake-engine", {"engine_dtype": "float32"})
    bfloat16 = FakeEngine(fake_reply, "fake-engine", {"engine_dtype": "bfloat16"})
    graded = []
    for engine in (float32, bfloat16, float32):
        batch = submit(client, triples(2), options=COT)
        run_worker(settings, worker_engine=engine)
        graded.append(client.get(batch["links"]["results"]).json()["items"])
    assert float32.calls == [2] and bfloat16.calls == [2]  # the third batch came from the float32 grades
    assert [{r["provenance"]["engine_dtype"] for r in results} for results in graded] == [
        {"float32"},
        {"bfloat16"},
        {"float32"},
    ]
    assert [{r.get("cached", False) for r in results} for results in graded] == [{False}, {False}, {True}]


def test_parse_errors_are_not_cached(client: TestClient[Litestar], settings: Settings, run_worker: Any) -> None:
    rambling = FakeEngine(lambda _: "I think the answer is quite relevant.", model_id="fake-engine")
    first = submit(client, triples(2), options=COT)
    run_worker(settings, worker_engine=rambling)
    assert client.get(first["links"]["self"]).json()["counts"]["parse_error"] == 2
    submit(client, triples(2), options=COT)
    run_worker(settings, worker_engine=rambling)
    assert rambling.calls == [2, 2]  # graded again, not served from the cache
