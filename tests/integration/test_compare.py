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
    for item in ("t0", "t1"):  # b's t0 and t1 are other triples (their marker changed): labelled C on their own
        assert client.patch(f"/v1/batches/{b}/items/{item}", json={"manual_label": "C"}).status_code == 200
    page = client.get("/ui/compare", params={"a": a, "b": b}).text
    # t0 and t1 moved from I and P to C, toward their label C; the other six are the same triples, labelled C.
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


def movement_ids(page: str, client: TestClient[Litestar], a: str, b: str) -> dict[str, list[str]]:
    shows = ("changed", "fixed", "regressed", "unchanged", "sideways")
    return {
        show: re.findall(
            LINK, client.get("/ui/compare", params={"a": a, "b": b, "show": show, "sort": "id", "dir": "asc"}).text
        )
        for show in shows
    }


def test_the_page_and_the_api_pair_items_and_labels_alike(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    a, b = two_runs(client, settings, run_worker)
    # The same triples under other ids: paired by content, by the API and the page alike.
    c = submit(client, "", [{**item, "id": f"c{n}"} for n, item in enumerate(triples(8, label=None))])
    run_worker(settings)
    for other, matched_by, shared in ((b, "id", 8), (c, "content", 8)):
        report = client.get("/v1/compare", params={"a": a, "b": other, "resamples": 0}).json()
        assert (report["matched_by"], report["shared"]) == (matched_by, shared)
        page = client.get("/ui/compare", params={"a": a, "b": other}).text
        assert f'data-testid="shared">{shared}<' in page
        assert ("matched by the triple" if matched_by == "content" else "matched by id") in page
        accuracy = report["differences"]["accuracy"]["difference"]
        assert f'data-testid="difference-accuracy">{accuracy:+.3f}' in page
        mcnemar = report["mcnemar"]
        assert f"a right only {mcnemar['only_a_right']}, b right only {mcnemar['only_b_right']}," in page
        assert f'<td class="num">{report["paired"]} paired</td>' in page
        listed = movement_ids(page, client, a, other)
        assert listed["changed"] == sorted(i["id"] for i in report["changed"])
        for kind in ("fixed", "regressed", "unchanged", "sideways"):
            assert listed[kind] == sorted(report[kind]), kind
    # b's t0 and t1 are other triples: a's label C is not theirs, so they are not paired (page and API alike).
    assert "t0" not in movement_ids("", client, a, b)["fixed"]
