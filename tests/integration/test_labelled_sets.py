"""Named labelled sets over the API (Litestar's test client, a real Redis, the FAKE worker): a set made of a batch's
labelled items is listed, exported as JSONL and imported again (into another tenant too), and a run started from it
grades its triples with their labels carried; bad input is a 4xx naming the field."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.runtime.settings import Settings
from juiz.store import Store
from tests.integration.helpers import make_settings, triples
from tests.integration.test_team_labels import MakeClient
from tests.integration.test_ui import KEYS, csrf_of, submit

ALICE = {"Authorization": f"Bearer {KEYS['alice']}"}
BOB = {"Authorization": f"Bearer {KEYS['bob']}"}
NDJSON = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def keyed(redis_url: str) -> Settings:
    """Two tenants, alice and bob."""
    return make_settings(redis_url, api_keys=",".join(f"{t}:{k}" for t, k in KEYS.items()))


RUBRIC = "C: answers the question from the transcript; P: part of it; I: wrong or unsupported."


def labelled_batch(client: TestClient[Litestar], settings: Settings, run_worker: Any, headers: dict[str, str]) -> str:
    """Six triples graded; t0, t1 and t2 labelled C, I and P by the key's holder."""
    batch_id = submit(client, headers["Authorization"].removeprefix("Bearer "), triples(6, label=None))
    run_worker(settings)
    for item, label in (("t0", "C"), ("t1", "I"), ("t2", "P")):
        response = client.patch(f"/v1/batches/{batch_id}/items/{item}", json={"manual_label": label}, headers=headers)
        assert response.status_code == 200, response.text
    return batch_id


def results(client: TestClient[Litestar], batch_id: str, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    items = client.get(f"/v1/batches/{batch_id}/results", headers=headers).json()["items"]
    return {r["id"]: r for r in items}


def test_a_named_set_is_listed_exported_imported_and_graded_again_with_its_labels(
    make_client: MakeClient, keyed: Settings, run_worker: Any, redis: Redis
) -> None:
    client = make_client(keyed)
    first = labelled_batch(client, keyed, run_worker, ALICE)
    made = client.post(
        "/v1/labelsets",
        json={"name": "lectures-dev", "batch": first, "rubric": RUBRIC, "description": "three labelled"},
        headers=ALICE,
    )
    assert made.status_code == 201, made.text
    view = made.json()
    assert (view["items"], view["labelled"], view["annotators"]) == (3, 3, ["alice"])
    assert view["source_batch"] == first and view["rubric"] == RUBRIC
    listed = client.get("/v1/labelsets", headers=ALICE).json()["sets"]
    assert [s["name"] for s in listed] == ["lectures-dev"]
    assert client.get("/v1/labelsets", headers=BOB).json()["sets"] == []  # another tenant's sets are not listed
    assert client.get("/v1/labelsets/lectures-dev", headers=BOB).status_code == 404

    exported = client.get("/v1/labelsets/lectures-dev/items", headers=ALICE)
    assert exported.status_code == 200 and exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [(line["id"], [a["label"] for a in line["annotations"]]) for line in lines] == [
        ("t0", ["C"]),
        ("t1", ["I"]),
        ("t2", ["P"]),
    ]
    assert all(line["triple"].startswith("t1:") and line["annotations"][0]["annotator"] == "alice" for line in lines)

    # A run of the set: its triples graded again, every label carried, the set's rubric in its label queue.
    started = client.post(
        "/v1/labelsets/lectures-dev/runs", json={"options": {"metrics": ["answer_relevance"]}}, headers=ALICE
    )
    assert started.status_code == 202, started.text
    second = started.json()["id"]
    assert started.json()["name"] == "lectures-dev" and started.json()["counts"]["total"] == 3
    assert started.headers["location"] == f"/v1/batches/{second}"
    run_worker(keyed)
    graded = results(client, second, ALICE)
    assert {i: r["manual_label"] for i, r in graded.items()} == {"t0": "C", "t1": "I", "t2": "P"}
    assert all(r["annotations"][0]["annotator"] == "alice" for r in graded.values())
    agreement = [client.get(f"/v1/batches/{b}/agreement", headers=ALICE).json()["n"] for b in (first, second)]
    assert agreement == [3, 3]
    assert Store(redis, keyed).annotations.rubric(second) == RUBRIC

    # The export imported by another tenant (another deployment's team): the triples and labels arrive with it,
    # and its own run of the set carries them.
    imported = client.post("/v1/labelsets/from-alice/items", content=exported.text, headers={**BOB, **NDJSON})
    assert imported.status_code == 200, imported.text
    assert imported.json() == {"name": "from-alice", "added": 3, "labels": 3, "items": 3}
    again = client.post("/v1/labelsets/from-alice/items", content=exported.text, headers={**BOB, **NDJSON}).json()
    assert (again["added"], again["items"]) == (0, 3)  # each triple once
    bob_run = client.post("/v1/labelsets/from-alice/runs", json={"name": "bob's run"}, headers=BOB).json()["id"]
    run_worker(keyed)
    assert {i: r["manual_label"] for i, r in results(client, bob_run, BOB).items()} == {"t0": "C", "t1": "I", "t2": "P"}

    # Deleting a set keeps its triples' labels.
    assert client.delete("/v1/labelsets/lectures-dev", headers=ALICE).status_code == 204
    assert client.get("/v1/labelsets/lectures-dev", headers=ALICE).status_code == 404
    assert len(client.get("/v1/labels", headers=ALICE).text.splitlines()) == 3


def test_a_set_of_all_graded_items_and_of_items_given(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    batch_id = submit(client, "", triples(4, label=None))
    run_worker(settings)
    extra = {**triples(1, start=9, label=None)[0], "annotations": [{"annotator": "carol", "label": "C"}]}
    made = client.post(
        "/v1/labelsets", json={"name": "all.4", "batch": batch_id, "labelled_only": False, "items": [extra]}
    )
    assert made.status_code == 201, made.text
    assert (made.json()["items"], made.json()["labelled"], made.json()["annotators"]) == (5, 1, ["carol"])


def test_bad_input_is_refused_naming_the_field(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    batch_id = submit(client, "", triples(2, label=None))
    run_worker(settings)

    def refused(response: Any, status: int, field: str) -> dict[str, Any]:
        assert response.status_code == status, response.text
        body: dict[str, Any] = response.json()
        assert body["field"] == field, body
        return body

    refused(client.post("/v1/labelsets", json={"name": "no spaces here", "batch": batch_id}), 422, "name")
    refused(client.post("/v1/labelsets", json={"name": "s", "batch": "0" * 32}), 422, "batch")
    refused(client.post("/v1/labelsets", json={"name": "s", "batch": batch_id}), 422, "items")  # nothing labelled
    refused(client.post("/v1/labelsets", json={"name": "s", "batch": batch_id, "labelled": False}), 422, "labelled")
    every = {"name": "s", "batch": batch_id, "labelled_only": False}
    assert client.post("/v1/labelsets", json=every).status_code == 201
    refused(client.post("/v1/labelsets", json=every), 409, "name")

    line = {**triples(1, start=5)[0], "triple": "t1:" + "0" * 64}
    body = refused(client.post("/v1/labelsets/s/items", json={"items": [line]}), 422, "triple")
    assert body["index"] == 0
    good = json.dumps(triples(1, start=6)[0])
    upload = f'{good}\n{{"question": "q", "answer": "a", "annotations": [{{"label": "C"}}]}}\n'
    body = refused(client.post("/v1/labelsets/s/items", content=upload, headers=NDJSON), 422, "annotations.0.annotator")
    assert body["line"] == 2
    malformed = client.post("/v1/labelsets/s/items", content=f"{good}\n{{oops\n", headers=NDJSON)
    assert malformed.status_code == 422 and malformed.json()["line"] == 2
    assert client.get("/v1/labelsets/s").json()["items"] == 2  # nothing of a refused upload was added

    refused(client.post("/v1/labelsets/s/runs", json={"options": {"metrcs": ["groundedness"]}}), 422, "options.metrcs")
    refused(client.post("/v1/labelsets/nope/runs", json={}), 404, "name")
    refused(client.get("/v1/labelsets/bad%20name"), 422, "name")


def test_the_page_keeps_exports_imports_and_grades_a_labelled_set(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    batch_id = submit(client, "", triples(3, label=None))
    run_worker(settings)
    assert client.patch(f"/v1/batches/{batch_id}/items/t1", json={"manual_label": "I"}).status_code == 200
    page = client.get(f"/ui/batches/{batch_id}").text
    assert 'data-testid="save-labelset"' in page
    csrf = csrf_of(page)
    kept = client.post(
        "/ui/labelsets", data={"_csrf_token": csrf, "batch": batch_id, "name": "dev-1"}, follow_redirects=False
    )
    assert kept.status_code == 303 and kept.headers["location"] == "/ui/labelsets#set-dev-1"
    listed = client.get("/ui/labelsets").text
    assert re.search(r'<tr id="set-dev-1">.*?<td class="num">1</td>\s*<td class="num">1</td>', listed, re.S)
    refused = client.post("/ui/labelsets", data={"_csrf_token": csrf, "batch": batch_id, "name": "bad name"})
    assert refused.status_code == 422 and "name" in refused.text and "<!doctype html>" in refused.text

    exported = client.get("/ui/labelsets/dev-1/export")
    assert exported.status_code == 200 and "attachment" in exported.headers["content-disposition"]
    assert [json.loads(line)["id"] for line in exported.text.splitlines()] == ["t1"]
    imported = client.post(
        "/ui/labelsets/import",
        data={"_csrf_token": csrf, "name": "copy"},
        files={"file": ("dev-1.labelled.jsonl", exported.content, "application/x-ndjson")},
        follow_redirects=False,
    )
    assert imported.status_code == 303, imported.text
    assert 'data-testid="imported">1 new triples' in client.get(imported.headers["location"]).text

    graded = client.post(
        "/ui/labelsets/runs",
        data={"_csrf_token": csrf, "set": "copy", "metrics": "answer_relevance", "mode": "fast"},
        follow_redirects=False,
    )
    assert graded.status_code == 303, graded.text
    run_id = graded.headers["location"].rsplit("/", 1)[-1]
    run_worker(settings)
    (result,) = client.get(f"/v1/batches/{run_id}/results").json()["items"]
    assert (result["id"], result["manual_label"]) == ("t1", "I")
    assert client.get(f"/v1/batches/{run_id}").json()["options"]["mode"] == "fast"

    edited = client.post(
        "/ui/labelsets/copy",
        data={"_csrf_token": csrf, "description": "from dev-1", "rubric": "C: right."},
        follow_redirects=False,
    )
    assert edited.status_code == 303 and edited.headers["location"] == "/ui/labelsets#set-copy"
    assert (
        client.get("/v1/labelsets/copy").json()["rubric"],
        client.get("/v1/labelsets/copy").json()["description"],
    ) == (
        "C: right.",
        "from dev-1",
    )
    assert ">C: right.</textarea>" in client.get("/ui/labelsets").text


def test_a_run_retried_with_its_idempotency_key_grades_the_set_once(
    client: TestClient[Litestar], settings: Settings, run_worker: Any, redis: Redis
) -> None:
    batch_id = submit(client, "", triples(2, label=None))
    run_worker(settings)
    every = {"name": "s", "batch": batch_id, "labelled_only": False}
    assert client.post("/v1/labelsets", json=every).status_code == 201
    assert client.post("/v1/labelsets", json={**every, "name": "other"}).status_code == 201
    key = {"Idempotency-Key": "run-1"}

    first = client.post("/v1/labelsets/s/runs", json={"name": "nightly"}, headers=key)
    retried = client.post("/v1/labelsets/s/runs", json={"name": "nightly"}, headers=key)
    assert first.status_code == retried.status_code == 202, retried.text
    assert retried.json()["id"] == first.json()["id"] and retried.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    batches, _ = Store(redis, settings).list_batches("public", 0, 100)
    assert [b.name for b in batches].count("nightly") == 1  # the retry made no batch

    for other in (
        client.post("/v1/labelsets/s/runs", json={"name": "weekly"}, headers=key),  # another body
        client.post("/v1/labelsets/other/runs", json={"name": "nightly"}, headers=key),  # another set
    ):
        assert other.status_code == 409 and other.json()["field"] == "Idempotency-Key", other.text
    unkeyed = client.post("/v1/labelsets/s/runs", json={"name": "nightly"})
    assert unkeyed.status_code == 202 and unkeyed.json()["id"] != first.json()["id"]


def test_a_sets_rubric_is_changed_and_the_runs_after_it_show_the_new_one(
    client: TestClient[Litestar], settings: Settings, run_worker: Any, redis: Redis
) -> None:
    batch_id = submit(client, "", triples(2, label=None))
    run_worker(settings)
    made = {"name": "s", "batch": batch_id, "labelled_only": False, "rubric": RUBRIC, "description": "first"}
    assert client.post("/v1/labelsets", json=made).status_code == 201
    before = client.post("/v1/labelsets/s/runs", json={}).json()["id"]

    changed = client.patch("/v1/labelsets/s", json={"rubric": "  C: right; P: half; I: wrong.  "})
    assert changed.status_code == 200, changed.text
    assert changed.json()["rubric"] == "C: right; P: half; I: wrong." and changed.json()["description"] == "first"
    assert client.get("/v1/labelsets/s").json()["rubric"] == "C: right; P: half; I: wrong."
    after = client.post("/v1/labelsets/s/runs", json={}).json()["id"]
    store = Store(redis, settings)
    assert (
        store.annotations.rubric(before) == RUBRIC and store.annotations.rubric(after) == "C: right; P: half; I: wrong."
    )

    for response, status, field in (
        (client.patch("/v1/labelsets/s", json={"rubrik": "x"}), 422, "rubrik"),
        (client.patch("/v1/labelsets/s", json={"rubric": "x" * 100_000}), 422, "rubric"),
        (client.patch("/v1/labelsets/nope", json={"rubric": "x"}), 404, "name"),
    ):
        assert response.status_code == status and response.json()["field"] == field, response.text
    assert client.get("/v1/labelsets/s").json()["rubric"] == "C: right; P: half; I: wrong."  # nothing refused was kept
