"""Labels per metric (Litestar's test client, a real Redis, the FAKE worker): an annotator labels one metric of an
item, over the API or on the item's page; the label joins the item's annotations without changing its label as a
whole, and the batch page's agreement section has a row per labelled metric."""

from __future__ import annotations

import re
from typing import Any

import pytest

from juiz.runtime.settings import Settings
from tests.integration.helpers import make_settings, triples
from tests.integration.test_team_labels import ALICE, BOB, MakeClient
from tests.integration.test_ui import KEYS, csrf_of, sign_in


@pytest.fixture
def team(redis_url: str) -> Settings:
    """Two keys of one tenant, each naming its holder."""
    return make_settings(redis_url, api_keys=f"team/alice:{KEYS['alice']},team/bob:{KEYS['bob']}")


def test_an_annotator_labels_one_metric_and_the_agreement_has_its_row(
    make_client: MakeClient,
    team: Settings,
    run_worker: Any,
) -> None:
    client = make_client(team)
    options = {"metrics": ["answer_relevance", "groundedness"]}
    submitted = client.post("/v1/batches", json={"items": triples(4, label=None), "options": options}, headers=ALICE)
    batch_id = submitted.json()["id"]
    run_worker(team)
    for headers, item, label in ((ALICE, "t1", "P"), (BOB, "t1", "P"), (ALICE, "t2", "I"), (BOB, "t3", "C")):
        body = {"manual_label": label, "metric": "groundedness", "comment": "the second sentence"}
        changed = client.patch(f"/v1/batches/{batch_id}/items/{item}", json=body, headers=headers)
        assert changed.status_code == 200, changed.text
        assert changed.json()["manual_label"] is None  # the answer as a whole is still unlabelled
    refused = client.patch(
        f"/v1/batches/{batch_id}/items/t1", json={"manual_label": "C", "metric": "fluency"}, headers=ALICE
    )
    assert refused.status_code == 422 and refused.json()["field"] == "metric"

    results = {r["id"]: r for r in client.get(f"/v1/batches/{batch_id}/results", headers=ALICE).json()["items"]}
    t1 = results["t1"]
    assert t1["manual_label"] is None
    assert sorted((a["annotator"], a["metric"], a["label"]) for a in t1["annotations"]) == [
        ("alice", "groundedness", "P"),
        ("bob", "groundedness", "P"),
    ]
    assert t1["annotations"][0]["comment"] == "the second sentence"

    sign_in(client, "alice")
    page = client.get(f"/ui/batches/{batch_id}").text
    row = re.search(r'<tr data-metric="groundedness"><th scope="row">groundedness</th><td class="num">(\d+)</td>', page)
    assert row is not None and row.group(1) == "3"
    assert 'data-metric="answer_relevance"' not in page  # nobody labelled it alone

    # On the item's page: a form per graded metric; alice's own label on groundedness preselected.
    item_page = client.get(f"/ui/batches/{batch_id}/items/1").text
    form = re.search(r'data-testid="metric-label-groundedness">.*?</form>', item_page, re.S)
    assert form is not None and '<option value="P" selected>' in form.group(0)
    assert 'data-testid="metric-label-answer_relevance"' in item_page
    saved = client.post(
        f"/ui/batches/{batch_id}/items/1/label",
        data={"_csrf_token": csrf_of(item_page), "manual_label": "C", "metric": "answer_relevance"},
        follow_redirects=False,
    )
    assert saved.status_code == 303
    page = client.get(f"/ui/batches/{batch_id}").text
    assert 'data-metric="answer_relevance"' in page
    bad = client.post(
        f"/ui/batches/{batch_id}/items/1/label",
        data={"_csrf_token": csrf_of(item_page), "manual_label": "C", "metric": "fluency"},
    )
    assert bad.status_code == 422 and "metric" in bad.text
    assert KEYS["alice"] not in page
