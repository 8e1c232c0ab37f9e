"""The agreement reports a finished batch caches are keyed on its labels' version: relabelling changes both
/agreement and /agreement/metrics (/agreement/metrics once kept accuracy 1.0 after it fell to 0.25). Real Redis,
a real RQ worker on the FAKE engine (it scores item N as N mod 4)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

from juiz.runtime.settings import Settings
from schemas import AgreementReport
from service import agreement
from tests.integration.helpers import triples

LABELS = ["I", "P", "P", "C"]  # what the fake engine's scores 0, 1, 2, 3 map to: full agreement


def test_relabelling_changes_both_cached_agreement_reports(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    items = [{**item, "manual_label": label} for item, label in zip(triples(4), LABELS, strict=True)]
    batch = client.post("/v1/batches", json={"items": items}).json()
    run_worker(settings)
    url = batch["links"]["self"]
    params = {"resamples": 0}

    def accuracies() -> tuple[float, float]:
        plain = client.get(f"{url}/agreement", params=params).json()
        by_metric = client.get(f"{url}/agreement/metrics", params=params).json()
        return plain["accuracy"]["value"], by_metric["columns"]["answer_relevance"]["accuracy"]["value"]

    assert accuracies() == (1.0, 1.0)  # both reports now cached: the batch is over
    for item_id in ("t0", "t1", "t2"):
        response = client.patch(f"{url}/items/{item_id}", json={"manual_label": "C"})
        assert response.status_code == 200, response.text
    assert accuracies() == (0.25, 0.25)
    assert client.patch(f"{url}/items/t0", json={"manual_label": "I"}).status_code == 200
    assert accuracies() == (0.5, 0.5)


def test_one_batchs_report_does_not_hold_up_anothers(
    client: TestClient[Litestar], settings: Settings, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One global lock made every tenant's report wait for the one being computed.
    slow = client.post("/v1/batches", json={"items": triples(4)}).json()
    quick = client.post("/v1/batches", json={"items": triples(4, start=4)}).json()
    run_worker(settings)
    started, release = threading.Event(), threading.Event()

    def compute(store: Any, record: Any, requested: int) -> AgreementReport:
        if record.id == slow["id"]:
            started.set()
            assert release.wait(60)
        return agreement._plain(store, record, requested)

    monkeypatch.setattr(agreement, "PLAIN", agreement._Kind("agreement", compute, AgreementReport))
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(client.get, f"{slow['links']['self']}/agreement")
        try:
            assert started.wait(60)
            other = pool.submit(client.get, f"{quick['links']['self']}/agreement")
            assert other.result(timeout=30).status_code == 200  # while the slow batch's report is still running
            assert not held.done()
        finally:
            release.set()
        assert held.result(timeout=60).status_code == 200
