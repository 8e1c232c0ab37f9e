"""Strict intake: labels the batch's mapping does not know, booleans read as numbers, NaN, Infinity
and 1e400, `options: null` and PATCH `{"manual_label": true}` are refused with a 422 naming the field and value;
nothing is stored. And every status the API answers is in its OpenAPI document."""

from __future__ import annotations

import json
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.runtime.settings import Settings
from tests.integration.helpers import juiz_keys, triples

NDJSON = {"Content-Type": "application/x-ndjson"}


def _batches(redis: Redis) -> list[str]:
    return [k for k in juiz_keys(redis) if k.startswith("juiz:batch:")]


def test_a_label_outside_the_mapping_is_422_naming_it(client: TestClient[Litestar], redis: Redis) -> None:
    items = triples(3)
    items[2]["manual_label"] = "X"
    response = client.post("/v1/batches", json={"items": items})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["index"] == 2 and body["field"] == "manual_label" and "'X'" in body["detail"]
    jsonl = "\n".join(json.dumps(t) for t in items)
    by_line = client.post("/v1/batches", content=jsonl, headers=NDJSON)
    assert by_line.status_code == 422 and by_line.json()["line"] == 3 and "'X'" in by_line.json()["detail"]
    one = client.post("/v1/grade", json={"item": items[2]})
    assert one.status_code == 422 and one.json()["field"] == "item.manual_label"
    assert not _batches(redis)


def test_labels_of_a_custom_mapping_and_numbers_are_accepted(client: TestClient[Litestar]) -> None:
    mapping = {"classes": [{"name": "N", "aliases": ["no"], "scores": [0, 1]}, {"name": "Y", "scores": [2, 3]}]}
    items = triples(3)
    items[0]["manual_label"], items[1]["manual_label"], items[2]["manual_label"] = "no", "Y", 2
    response = client.post("/v1/batches", json={"items": items, "options": {"label_mapping": mapping}})
    assert response.status_code == 202, response.text
    items[0]["manual_label"] = "C"  # a default-mapping label, not this mapping's
    refused = client.post("/v1/batches", json={"items": items, "options": {"label_mapping": mapping}})
    assert refused.status_code == 422 and "'C'" in refused.json()["detail"]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"items": [{"question": "Q?", "answer": "A", "manual_label": true}]}', "manual_label"),
        (
            '{"items": [{"question": "Q?", "answer": "A", "context": [{"text": "t", "score": true}]}]}',
            "context.0.score",
        ),
        ('{"items": [{"question": "Q?", "answer": "A", "x": NaN}]}', None),
        ('{"items": [{"question": "Q?", "answer": "A", "x": Infinity}]}', None),
        ('{"items": [{"question": "Q?", "answer": "A", "x": 1e400}]}', None),
        ('{"items": [{"question": "Q?", "answer": "A"}], "options": null}', "options"),
    ],
)
def test_no_silent_coercions(client: TestClient[Litestar], redis: Redis, raw: str, field: str | None) -> None:
    response = client.post("/v1/batches", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json().get("field") == field
    assert not _batches(redis)


def test_nan_in_a_jsonl_upload_is_422_naming_the_line(client: TestClient[Litestar]) -> None:
    body = '{"question": "Q?", "answer": "A"}\n{"question": "Q?", "answer": "A", "score": NaN}\n'
    response = client.post("/v1/batches", content=body, headers=NDJSON)
    assert response.status_code == 422 and response.json()["line"] == 2


def test_patch_true_as_a_label_is_422(client: TestClient[Litestar], settings: Settings, run_worker: Any) -> None:
    created = client.post("/v1/batches", json={"items": triples(1)}).json()
    run_worker(settings)
    url = f"/v1/batches/{created['id']}/items/t0"
    response = client.patch(url, json={"manual_label": True})
    assert response.status_code == 422 and response.json()["field"] == "manual_label"
    assert client.patch(url, json={"manual_label": "I"}).status_code == 200


def test_every_answered_status_is_documented(client: TestClient[Litestar], settings: Settings) -> None:
    """The statuses these routes answer in the tests above and in test_edge (422 on agreement, 413, 503 …)."""
    paths = client.get("/schema/openapi.json").json()["paths"]
    for path, method, statuses in (
        ("/v1/batches", "post", {"401", "409", "413", "415", "422", "429", "503"}),
        ("/v1/batches/{batch_id}/agreement", "get", {"401", "404", "422", "429", "503"}),
        ("/v1/batches/{batch_id}/agreement/metrics", "get", {"401", "404", "422", "429", "503"}),
        ("/v1/batches/{batch_id}/results", "get", {"401", "404", "422", "429", "503"}),
        ("/v1/grade", "post", {"401", "413", "415", "422", "429", "503"}),
    ):
        documented = set(paths[path][method]["responses"])
        assert statuses <= documented, (path, statuses - documented)


def test_typed_bodies_are_refused_422_naming_the_field(client: TestClient[Litestar], redis: Redis) -> None:
    """Litestar validates the handlers' typed bodies; what it refuses is a 422 naming the field (not its own 400),
    and a body in another media type is a 415."""
    batch_id = client.post("/v1/batches", json={"items": triples(1)}).json()["id"]
    before = juiz_keys(redis)
    for url, body, field in (
        (f"/v1/batches/{batch_id}", {"name": "x", "colour": "red"}, "colour"),
        (f"/v1/batches/{batch_id}", {"name": "x" * 201}, "name"),
        (f"/v1/batches/{batch_id}", {}, "name"),
        (f"/v1/batches/{batch_id}/items/t0", {}, "manual_label"),
    ):
        response = client.patch(url, json=body)
        assert response.status_code == 422 and response.json()["field"] == field, (url, body, response.text)
    for body, field in (({"items": "x"}, "items"), ({"items": []}, "items"), ({"items": triples(1), "x": 1}, "x")):
        response = client.post("/v1/batches", json=body)
        assert response.status_code == 422 and response.json()["field"] == field, (body, response.text)
    assert client.post("/v1/grade", json={"options": {}}).json()["field"] == "item"
    assert client.post("/v1/batches", content=b"", headers={"Content-Type": "application/json"}).status_code == 422
    plain = client.patch(f"/v1/batches/{batch_id}", content=b'{"name": "x"}', headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415 and plain.json()["field"] == "Content-Type"
    assert juiz_keys(redis) == before


def test_the_document_takes_the_bodies_from_the_models(client: TestClient[Litestar]) -> None:
    paths = client.get("/schema/openapi.json").json()["paths"]
    for path, method, model in (
        ("/v1/batches", "post", "BatchSubmission"),
        ("/v1/grade", "post", "GradeRequest"),
        ("/v1/batches/{batch_id}", "patch", "BatchRename"),
        ("/v1/batches/{batch_id}/items/{item_id}", "patch", "LabelChange"),
    ):
        body = paths[path][method]["requestBody"]
        assert body["required"] is True
        assert body["content"]["application/json"]["schema"] == {"$ref": f"#/components/schemas/{model}"}
        # No never-called dependency documents a body any more: nothing but the body's own parameters.
        assert not {p["name"] for p in paths[path][method].get("parameters", [])} & {"submission", "grade_request"}
