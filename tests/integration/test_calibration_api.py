"""Calibration and uncertainty through the API: raw vs calibrated agreement, options.calibration applied by the
workers, results listed most uncertain first (FAKE engine: score = item number mod 4)."""

from __future__ import annotations

import json
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient

from juiz.calibration.fitting import fit_from_results
from juiz.runtime.settings import Settings
from schemas import Judgement, LabelMapping
from tests.integration.helpers import triples

LABELS = {0: "I", 1: "P", 2: "P", 3: "C"}


def _labelled(n: int) -> list[dict[str, Any]]:
    items = triples(n, label=None)
    for i, item in enumerate(items):
        item["manual_label"] = LABELS[i % 4]
    return items


# The calibration's features asserted below are those of CoT results (an expected score per metric): these batches
# pin the CoT prompts. A check-based result (the default) also offers each check's P(yes) as a feature.
COT = {"prompt": ["answer_relevance@juiz-1", "groundedness@juiz-1"]}


def _submit(client: TestClient[Litestar], items: list[dict[str, Any]], options: dict[str, Any]) -> dict[str, Any]:
    response = client.post("/v1/batches", json={"items": items, "options": options})
    assert response.status_code == 202, response.text
    return dict(response.json())


def _all_results(client: TestClient[Litestar], url: str, **params: str) -> list[dict[str, Any]]:
    return list(client.get(url, params={"limit": "1000", **params}).json()["items"])


def test_agreement_shows_raw_and_calibrated_and_a_calibration_applies_to_new_batches(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    labelled = _submit(client, _labelled(24), {"prompt": COT["prompt"][0]})
    run_worker(settings)
    report = client.get(labelled["links"]["agreement"], params={"resamples": "50"}).json()
    calibration = report["calibration"]
    assert calibration["features"] == ["answer_relevance.expected_score"]
    assert calibration["n"] == 24 and calibration["unavailable"] is None
    assert calibration["raw"]["accuracy"]["value"] == 1.0
    assert calibration["calibrated"]["n"] == 24
    assert {"brier", "ece", "reliability"} <= set(calibration["calibrated_figures"])

    results = [Judgement.model_validate(r) for r in _all_results(client, labelled["links"]["results"])]
    spec = fit_from_results(results, LabelMapping()).to_json()
    fresh = _submit(client, triples(4, label=None, prefix="u"), {"calibration": spec})
    run_worker(settings)
    graded = _all_results(client, fresh["links"]["results"])
    assert len(graded) == 4
    for result in graded:
        assert result["provenance"]["calibration"] == {"id": spec["id"], "sha256": spec["sha256"]}
        assert result["calibrated"]["label"] in {"I", "P", "C"}
        assert abs(sum(result["calibrated"]["probabilities"].values()) - 1) < 1e-5


def test_an_altered_calibration_is_a_422_naming_the_field(client: TestClient[Litestar]) -> None:
    results = [
        Judgement.model_validate(
            {
                "id": f"x{i}",
                "status": "ok",
                "score": i % 4,
                "expected_score": (i % 4) / 3 * 0.9 + 0.05,
                "question": "q",
                "answer": "a",
                "manual_label": LABELS[i % 4],
                "provenance": {"model": "m", "prompt": "p", "prompt_sha256": "", "sampling": {}, "juiz_version": "0"},
            }
        )
        for i in range(16)
    ]
    spec = fit_from_results(results, LabelMapping()).to_json()
    spec["model"]["intercept"] = [0.0 for _ in spec["model"]["intercept"]]
    response = client.post("/v1/batches", json={"items": triples(1), "options": {"calibration": spec}})
    assert response.status_code == 422
    assert "calibration" in response.text and "altered" in response.text


def test_results_most_uncertain_first(client: TestClient[Litestar], settings: Settings, run_worker: Any) -> None:
    # CoT pinned: the uncertainty asserted below is the digit distribution's (check prompts have none).
    batch = _submit(client, _labelled(8), {"prompt": "answer_relevance@juiz-1"})
    run_worker(settings)
    ranked = _all_results(client, batch["links"]["results"], order="uncertain")
    assert len(ranked) == 8
    flags = [r["uncertain"] for r in ranked]
    assert flags == sorted(flags, reverse=True)  # flagged ones first
    flagged = [r["uncertainty"]["score"] for r in ranked if r["uncertain"]]
    assert flagged == sorted(flagged, reverse=True)
    # FakeEngine's digit distribution puts a 0 at 0.6 and a 3 at 2.4 on 0–3: both near a cut point (0.5, 2.5).
    assert {r["score"] for r in ranked if r["uncertain"]} == {0, 3}
    refused = client.get(batch["links"]["results"], params={"order": "uncertain", "follow": "true"})
    assert refused.status_code == 422 and "order" in refused.text


def test_jsonl_upload_with_metrics_then_agreement_by_metric_and_a_fitted_calibration(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    jsonl = "\n".join(json.dumps(item) for item in _labelled(24))
    response = client.post(
        "/v1/batches",
        content=jsonl,
        params={"metrics": "answer_relevance, groundedness", "samples": "1", "prompt": ",".join(COT["prompt"])},
        headers={"Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 202, response.text
    batch = response.json()
    assert batch["options"]["metrics"] == ["answer_relevance", "groundedness"]
    run_worker(settings)

    by_metric = client.get(batch["links"]["agreement_by_metric"], params={"resamples": "20"})
    assert by_metric.status_code == 200, by_metric.text
    columns = by_metric.json()["columns"]
    assert set(columns) == {
        "answer_relevance",
        "answer_relevance (expected)",
        "groundedness",
        "groundedness (expected)",
        "verdict",
        "verdict (expected)",
    }
    assert all(column["n"] == 24 for column in columns.values())
    # FAKE engine: both metrics score item mod 4, exactly the labels' order, so each agrees fully.
    assert columns["answer_relevance"]["accuracy"]["value"] == 1.0
    assert by_metric.json()["verdict"]  # the rule the verdict columns used is shown

    fitted = client.get(batch["links"]["calibration"], params={"folds": "3"})
    assert fitted.status_code == 200, fitted.text
    spec = fitted.json()
    assert spec["features"] == ["answer_relevance.expected_score", "groundedness.expected_score"]
    assert spec["cross_fitted"]["folds"] == 3
    fresh = _submit(
        client,
        triples(4, label=None, prefix="u"),
        {"metrics": ["answer_relevance", "groundedness"], "calibration": spec},
    )
    run_worker(settings)
    for result in _all_results(client, fresh["links"]["results"]):
        assert result["provenance"]["calibration"] == {"id": spec["id"], "sha256": spec["sha256"]}


def test_calibration_of_a_batch_without_enough_labels_is_a_409_with_the_reason(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    batch = _submit(client, triples(3, label="C"), {})
    run_worker(settings)
    response = client.get(batch["links"]["calibration"])
    assert response.status_code == 409
    assert "cannot calibrate" in response.json()["detail"]
    assert response.json()["field"] == "manual_label"


def test_jsonl_query_options_are_validated_naming_the_option(client: TestClient[Litestar]) -> None:
    jsonl = json.dumps(triples(1)[0])
    headers = {"Content-Type": "application/x-ndjson"}
    unknown = client.post("/v1/batches", content=jsonl, params={"metrics": "answer_relevance,tone"}, headers=headers)
    assert unknown.status_code == 422 and unknown.json()["field"].startswith("options.metrics")
    fast_samples = client.post("/v1/batches", content=jsonl, params={"mode": "fast", "samples": "3"}, headers=headers)
    assert fast_samples.status_code == 422 and "samples" in fast_samples.json()["detail"]
