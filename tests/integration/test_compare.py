"""GET /v1/compare and /ui/compare against a real Redis and the FAKE worker: two runs of the same items, the
second scoring some differently (the fake engine scores a question by its [item-N] marker)."""

from __future__ import annotations

import re
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient

from juiz.runtime.settings import Settings
from service.rows import _BOOTSTRAPS
from tests.integration.helpers import triples
from tests.integration.test_ui import submit


def two_runs(client: TestClient[Litestar], settings: Settings, run_worker: Any) -> tuple[str, str]:
    first = triples(8, label="C")  # scores 0 1 2 3 0 1 2 3
    second = triples(8, label=None)
    for n, item in enumerate(second):
        item["question"] = item["question"].replace(f"[item-{n}]", f"[item-{3 if n < 2 else n}]")  # t0, t1 → 3
    a, b = submit(client, "", first), submit(client, "", second + triples(2, start=20))
    run_worker(settings)
    return a, b


def test_compare_two_runs_over_the_api(client: TestClient[Litestar], settings: Settings, run_worker: Any) -> None:
    a, b = two_runs(client, settings, run_worker)
    response = client.get("/v1/compare", params={"a": a, "b": b, "resamples": 50})
    assert response.status_code == 200, response.text
    report = response.json()
    assert (report["shared"], report["only_a"], report["only_b"]) == (8, 0, 2)
    assert report["score_deltas"]["3"] == 1 and report["score_deltas"]["2"] == 1  # t0: 0 → 3, t1: 1 → 3
    assert report["score_deltas"]["0"] == 6
    assert {i["id"]: (i["label_a"], i["label_b"]) for i in report["changed"]} == {"t0": ("I", "C"), "t1": ("P", "C")}
    # A label belongs to its triple: b's t0 and t1 ask another question (their marker changed), so a's labels don't
    # carry over to them; on the other six, the same triples, b is compared with a's labels.
    assert (report["agreement_a"]["n"], report["agreement_b"]["n"], report["paired"]) == (8, 6, 6)
    assert report["unchanged"] == ["t2", "t3", "t4", "t5", "t6", "t7"] and report["fixed"] == report["regressed"] == []
    assert report["differences"]["accuracy"]["difference"] == 0.0
    assert report["mcnemar"]["p_value"] == 1.0 and report["mcnemar"]["method"] == "exact binomial"
    assert report["agreement_b"]["accuracy"]["value"] > report["agreement_a"]["accuracy"]["value"]
    assert report["agreement_a"]["accuracy"]["ci95"] is not None
    assert client.get("/v1/compare", params={"a": a, "b": "0" * 32}).status_code == 404
    assert "compareBatches" in client.get("/schema/openapi.json").text


LINK = r'ib=\d+" data-testid="side-by-side">(t\d+)</a>'


def test_compare_page_lists_the_changed_items_sortable(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    a, b = two_runs(client, settings, run_worker)
    page = client.get("/ui/compare", params={"a": a, "b": b, "sort": "id", "dir": "asc"})
    assert page.status_code == 200
    assert re.findall(LINK, page.text) == ["t0", "t1"]
    by_delta = client.get("/ui/compare", params={"a": a, "b": b, "sort": "delta", "dir": "desc"}).text
    assert re.findall(LINK, by_delta) == ["t0", "t1"]
    by_delta_asc = client.get("/ui/compare", params={"a": a, "b": b, "sort": "delta", "dir": "asc"}).text
    assert re.findall(LINK, by_delta_asc) == ["t1", "t0"]
    assert "<svg" in page.text and 'data-testid="compare-agreement"' in page.text
    # The intervals come from a background bootstrap; the stats alone answer 202 until they are in.
    assert client.get("/ui/compare/stats", params={"a": a, "b": b}).status_code in (200, 202)
    _BOOTSTRAPS.submit(lambda: None).result()  # one job at a time: the bootstrap is over after this one
    stats = client.get("/ui/compare/stats", params={"a": a, "b": b})
    assert stats.status_code == 200 and "percentile bootstrap, 200 resamples" in stats.text


def test_the_sync_client_compares_and_renames(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    from juiz.clients import JuizClient

    a, b = two_runs(client, settings, run_worker)
    juiz = JuizClient(http=client)
    report = juiz.compare(a, b, resamples=0)
    assert report.shared == 8 and {i.id for i in report.changed} == {"t0", "t1"}
    assert juiz.rename(b, "re-run").name == "re-run" and juiz.batch(b).name == "re-run"


def test_compare_page_differences_mcnemar_filters_side_by_side_and_picker(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    a, b = two_runs(client, settings, run_worker)
    page = client.get("/ui/compare", params={"a": a, "b": b}).text
    # The page compares b's items with a's labels (by id): t0 and t1 moved from I and P to C, toward the label C.
    assert 'data-testid="difference-accuracy">+0.250' in page and "paired 95% CI" in page
    assert "a right only 0, b right only 2, p = 0.5" in page
    expected = {"fixed": ["t0", "t1"], "regressed": [], "unchanged": [f"t{n}" for n in range(2, 8)]}
    for show, ids in {**expected, "changed": ["t0", "t1"]}.items():
        listed = client.get("/ui/compare", params={"a": a, "b": b, "show": show, "sort": "id", "dir": "asc"}).text
        assert re.findall(LINK, listed) == ids, show
    side = re.search(r'href="(/ui/compare/item\?[^"]+)"', page).group(1).replace("&amp;", "&")  # type: ignore[union-attr]
    both = client.get(side)
    assert (
        both.status_code == 200 and 'data-testid="judge-a">I<' in both.text and 'data-testid="judge-b">C<' in both.text
    )

    # The picker: name, date, how many graded, options; a run with nothing graded can't be picked.
    cancelled = client.post("/v1/batches", json={"items": triples(2, start=40)}).json()["id"]
    assert client.delete(f"/v1/batches/{cancelled}").status_code == 200
    picker = client.get("/ui/compare").text
    assert re.search(rf'<option value="{cancelled}" disabled>.*nothing graded', picker)
    assert re.search(rf'<option value="{a}">.* UTC · 8 of 8 graded · ', picker)
    refused = client.get("/ui/compare", params={"a": a, "b": cancelled})
    assert refused.status_code == 422 and "nothing graded" in refused.text
