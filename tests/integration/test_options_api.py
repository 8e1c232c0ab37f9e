"""Options over HTTP: the JSONL upload's query parameters and the web page's form are read from schemas.BatchOptions'
fields; an unknown option, query parameter or label-mapping key is a 422 naming it, and nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Callable

from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis

from juiz.formats.options import OPTIONS
from juiz.runtime.settings import Settings
from tests.integration.helpers import juiz_keys, make_settings, triples

NDJSON = {"Content-Type": "application/x-ndjson"}
MakeClient = Callable[[Settings], TestClient[Litestar]]


def _jsonl(n: int = 2) -> str:
    return "\n".join(json.dumps(t) for t in triples(n)) + "\n"


def test_label_mapping_typo_is_422_naming_the_key(client: TestClient[Litestar], redis: Redis) -> None:
    for mapping, key in (
        ({"metrc": "groundedness"}, "options.label_mapping.metrc"),
        ({"signal": "expected_score", "tresholds": [0.5, 2.5]}, "options.label_mapping.tresholds"),
    ):
        response = client.post("/v1/batches", json={"items": triples(1), "options": {"label_mapping": mapping}})
        assert response.status_code == 422, response.text
        assert response.json()["field"] == key
    assert not [k for k in juiz_keys(redis) if ":batch:" in k]


def test_unknown_query_parameter_on_a_jsonl_upload_is_422(client: TestClient[Litestar], redis: Redis) -> None:
    response = client.post("/v1/batches", content=_jsonl(), headers=NDJSON, params={"mode": "cot", "lagn": "en"})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "lagn"
    mapping = client.post(
        "/v1/batches", content=_jsonl(), headers=NDJSON, params={"label_mapping": json.dumps({"metrc": "x"})}
    )
    assert mapping.status_code == 422 and mapping.json()["field"] == "options.label_mapping.metrc"
    assert not [k for k in juiz_keys(redis) if ":batch:" in k]


def test_query_options_with_a_json_body_are_refused(client: TestClient[Litestar]) -> None:
    response = client.post("/v1/batches", json={"items": triples(1)}, params={"mode": "fast"})
    assert response.status_code == 422 and response.json()["field"] == "mode"


def test_every_option_is_a_query_parameter(client: TestClient[Litestar]) -> None:
    response = client.post(
        "/v1/batches",
        content=_jsonl(),
        headers=NDJSON,
        params={
            "metrics": "answer_relevance,groundedness",
            "samples": "2",
            "temperature": "0.5",
            "label_mapping": json.dumps({"signal": "expected_score"}),
        },
    )
    assert response.status_code == 202, response.text
    options = response.json()["options"]
    assert options["metrics"] == ["answer_relevance", "groundedness"] and options["samples"] == 2
    assert options["temperature"] == 0.5 and options["label_mapping"]["signal"] == "expected_score"
    spec = client.get("/schema/openapi.json").json()
    documented = {p["name"] for p in spec["paths"]["/v1/batches"]["post"]["parameters"] if p["in"] == "query"}
    assert documented == {*OPTIONS, "field_map", "name"}


def test_the_upload_form_reads_every_option(make_client: MakeClient, redis_url: str) -> None:
    client = make_client(make_settings(redis_url))
    csrf = _csrf(client.get("/ui/batches").text)
    files = {"file": ("t.jsonl", _jsonl(), "application/x-ndjson")}
    bad = client.post(
        "/ui/batches", data={"_csrf_token": csrf, "label_mapping": json.dumps({"metrc": "x"})}, files=files
    )
    assert bad.status_code == 422 and "metrc" in bad.text
    sampled = client.post(
        "/ui/batches",
        data={"_csrf_token": csrf, "samples": "2", "temperature": "0.4"},
        files=files,
        follow_redirects=False,
    )
    assert sampled.status_code == 303, sampled.text
    batch_id = sampled.headers["location"].rstrip("/").split("/")[-1]
    assert client.get(f"/v1/batches/{batch_id}").json()["options"]["samples"] == 2


def _csrf(html: str) -> str:
    import re

    match = re.search(r'name="_csrf_token" value="([^"]+)"', html)
    assert match
    return match.group(1)


def _verifier(**changes: object) -> dict[str, object]:
    """A probe's JSON as `juiz train --probe` writes it (made up: one feature, P(Yes) alone)."""
    from juiz.judging.probe import PROMPT_HASH
    from schemas.verifier import probe_version

    spec: dict[str, object] = {
        "model": "qwen2.5-coder-1.5b-instruct",
        "prompt_hash": PROMPT_HASH,
        "layer": None,
        "with_p_yes": True,
        "mean": [0.0],
        "scale": [1.0],
        "weights": [1.0],
        "bias": 0.0,
        "cut": 0.02,
    }
    spec["version"] = probe_version(str(spec["model"]), None, PROMPT_HASH, [1.0], 0.0)
    return spec | changes


def test_a_verifier_without_groundedness_or_altered_is_422_and_nothing_is_stored(
    client: TestClient[Litestar], redis: Redis
) -> None:
    alone = client.post("/v1/batches", json={"items": triples(1), "options": {"verifier": _verifier()}})
    assert alone.status_code == 422, alone.text
    assert "verifier reads groundedness" in alone.text
    altered = client.post(
        "/v1/batches",
        json={"items": triples(1), "options": {"metrics": ["groundedness"], "verifier": _verifier(bias=2.0)}},
    )
    assert altered.status_code == 422, altered.text
    assert altered.json()["field"].startswith("options.verifier") and "altered" in altered.text
    assert not [k for k in juiz_keys(redis) if ":batch:" in k]
    accepted = client.post(
        "/v1/batches", json={"items": triples(1), "options": {"metrics": ["groundedness"], "verifier": _verifier()}}
    )
    assert accepted.status_code == 202, accepted.text


def test_a_verifier_for_another_judge_fails_the_items_with_the_reason_at_the_worker(
    client: TestClient[Litestar], settings: Settings, run_worker: Callable[..., bool]
) -> None:
    """The API can't know the workers' judge; the worker refuses the probe before any engine work, item by item."""
    options = {"metrics": ["answer_relevance", "groundedness"], "verifier": _verifier()}
    submitted = client.post("/v1/batches", json={"items": triples(2), "options": options})
    assert submitted.status_code == 202, submitted.text
    run_worker(settings)
    results = client.get(f"/v1/batches/{submitted.json()['id']}/results").json()["items"]
    assert [r["status"] for r in results] == ["failed", "failed"]
    refused = "reads the states of qwen2.5-coder-1.5b-instruct; this judge is fake-engine"
    assert all(refused in r["error"] for r in results)
