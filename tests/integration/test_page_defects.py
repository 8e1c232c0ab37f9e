"""Smaller defects of the batch and item pages, each pinned by a test that failed before its fix (Litestar's test
client, a real Redis, the FAKE worker): a text search over question and answer, exports that follow the table's
filter and keep every field, label times to the minute, checks beside what they asked about, and the agreement
section naming which of the judge's grades gives its label."""

from __future__ import annotations

import csv
import io
import json
import re
from typing import Any

from litestar import Litestar
from litestar.testing import TestClient

from juiz.runtime.settings import Settings
from tests.integration.helpers import triples
from tests.integration.test_ui import csrf_of, submit


def shown_items(page: str) -> list[str]:
    return re.findall(r'/items/(\d+)">\d+</a>', page)


def test_search_and_filtered_exports_with_every_field(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    items = triples(6, label=None)
    items[2]["answer"] = "The Krebs cycle releases energy."
    items[4]["question"] = "Where does the KREBS cycle happen? [item-4]"
    for n, item in enumerate(items):
        item["course"] = f"BIO-{n}"
        item["tags"] = ["week 3"]
    batch_id = submit(client, "", items)
    run_worker(settings)
    page = client.get(f"/ui/batches/{batch_id}", params={"q": "krebs cycle", "sort": "index", "dir": "asc"}).text
    assert shown_items(page) == ["2", "4"]
    assert "results.jsonl?q=krebs+cycle" in page and "Export JSONL (filtered)" in page

    exported = client.get(f"/ui/batches/{batch_id}/results.jsonl", params={"q": "krebs cycle"}).text.splitlines()
    assert sorted(json.loads(line)["id"] for line in exported) == ["t2", "t4"]
    assert all(json.loads(line)["course"].startswith("BIO-") for line in exported)
    rows = list(
        csv.DictReader(io.StringIO(client.get(f"/ui/batches/{batch_id}/results.csv", params={"q": "krebs"}).text))
    )
    assert sorted(r["id"] for r in rows) == ["t2", "t4"]
    assert rows[0]["context"].startswith("Transcript about topic") and rows[0]["course"].startswith("BIO-")
    assert len(client.get(f"/ui/batches/{batch_id}/results.csv").text.splitlines()) == 7  # no filter: every row


def test_label_times_are_readable_and_the_judge_label_source_is_named(
    client: TestClient[Litestar], settings: Settings, run_worker: Any
) -> None:
    batch_id = submit(client, "", triples(2, label=None))
    run_worker(settings)
    url = f"/ui/batches/{batch_id}/items/0"
    csrf = csrf_of(client.get(url).text)
    saved = client.post(f"{url}/label", data={"_csrf_token": csrf, "manual_label": "C", "comment": "clear"}).text
    assert re.search(r"last set by public, \d{4}-\d\d-\d\d \d\d:\d\d UTC\)", saved)
    assert not re.search(r"\d\d:\d\d:\d\d\.\d{6}", saved)  # no raw ISO with microseconds
    assert "<q>clear</q>" in saved
    page = client.get(f"/ui/batches/{batch_id}").text
    assert 'data-testid="judge-label-source">The judge\'s label: the main metric (answer_relevance' in page
