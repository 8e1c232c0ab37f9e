"""`field_map` on the API: other tools' field names in a JSON body, a JSONL upload and the Python client."""

from __future__ import annotations

import json
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.clients import JuizClient
from juiz.runtime.settings import Settings
from tests.integration.helpers import juiz_keys, queued_jobs


def ragas(i: int) -> dict[str, Any]:
    return {
        "id": f"r{i}",
        "user_input": f"What does the lecture say about topic {i}? [item-{i}]",
        "retrieved_contexts": [f"Transcript about topic {i}.", "Another passage."],
        "response": f"It explains topic {i} in detail.",
        "reference": f"Topic {i}.",
    }


def test_a_ragas_batch_is_graded_with_its_own_names(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    juiz = JuizClient(http=client)
    batch = juiz.submit([ragas(0), ragas(1)], field_map="ragas")
    run_worker(settings)
    assert juiz.wait(batch.id, poll_s=0.01).counts.ok == 2
    results = sorted(juiz.results(batch.id), key=lambda r: r.id)
    assert results[0].question.startswith("What does the lecture say about topic 0?")
    assert isinstance(results[0].context, list) and results[0].context[0].text == "Transcript about topic 0."
    assert results[0].model_extra is not None and results[0].model_extra["reference"] == "Topic 0."


def test_jsonl_upload_with_field_map_in_the_query(client: TestClient[Litestar]) -> None:
    body = "\n".join(json.dumps({"query": r["user_input"], "response": r["response"]}) for r in map(ragas, range(2)))
    response = client.post(
        "/v1/batches",
        content=body,
        params={"field_map": "common"},
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 202, response.text
    assert response.json()["counts"]["total"] == 2


def test_errors_name_the_field_as_the_user_wrote_it_and_store_nothing(
    client: TestClient[Litestar], settings: Settings, redis: Redis
) -> None:
    items = [ragas(0), {k: v for k, v in ragas(1).items() if k != "response"}]
    missing = client.post("/v1/batches", json={"items": items, "field_map": "ragas"})
    assert missing.status_code == 422
    assert (missing.json()["index"], missing.json()["field"]) == (1, "response")
    custom = client.post(
        "/v1/batches", json={"items": [{"prompt": "q?"}], "field_map": {"prompt": "question", "completion": "answer"}}
    )
    assert custom.status_code == 422 and custom.json()["field"] == "completion"
    # A path is never read on the server: only presets and JSON objects.
    path = client.post("/v1/batches", json={"items": [ragas(0)], "field_map": "/etc/passwd"})
    assert path.status_code == 422 and path.json()["field"] == "field_map"
    grade = client.post("/v1/grade", json={"item": ragas(0), "field_map": "nope"})
    assert grade.status_code == 422 and grade.json()["field"] == "field_map"
    assert juiz_keys(redis) == [] and queued_jobs(redis, settings) == 0
