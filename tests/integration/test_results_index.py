"""`order=uncertain` pages are served from the batch's sorted-set index, written when results are
stored, never from the whole batch in memory; the pages match the full sort
(juiz.judging.uncertainty.uncertain_first)."""

from __future__ import annotations

from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient
from redis import Redis
from redis.commands.core import AsyncScript

from juiz.judging.uncertainty import uncertain_first
from juiz.runtime.settings import Settings
from juiz.store import Store
from juiz.store.results import UNCERTAIN_PAGE, Results
from schemas import Judgement
from service.controllers import batches
from tests.integration.helpers import triples

LABELS = ("I", "P", "P", "C")


def test_uncertain_pages_come_from_the_index_in_the_full_sorts_order(
    client: TestClient[Litestar], settings: Settings, run_worker: Any, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    items = triples(22, label=None)
    for i, item in enumerate(items):
        item["manual_label"] = LABELS[i % 4]
    # CoT pinned: its digit distribution gives the FAKE engine's results uncertainties that differ (and tie)
    response = client.post("/v1/batches", json={"items": items, "options": {"prompt": "answer_relevance@juiz-1"}})
    assert response.status_code == 202, response.text
    batch = response.json()
    run_worker(settings)
    store = Store(redis, settings)
    expected = [(j.id, j.score, j.uncertain) for j in uncertain_first(store.results_in_input_order(batch["id"]))]

    def whole_batch(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("order=uncertain read every result of the batch")

    monkeypatch.setattr(Results, "in_input_order", whole_batch)
    served: list[tuple[Any, ...]] = []
    cursor: str | None = None
    while True:
        params = {"order": "uncertain", "limit": "5", **({"cursor": cursor} if cursor else {})}
        page = client.get(batch["links"]["results"], params=params).json()
        served += [(r["id"], r["score"], r["uncertain"]) for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert served == expected and len(served) == 22
    assert {flag for _, _, flag in served} == {True, False}  # both groups, so the order was tested
    index = store.batch_key(batch["id"], "uncertain")
    assert redis.zcard(index) == 22 and 0 < redis.ttl(index) <= settings.retention_s  # retained with the batch


def test_uncertain_pages_are_the_stored_json_never_revalidated(
    client: TestClient[Litestar], settings: Settings, run_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench.uncertain_pages: 20 readers of these pages pushed another tenant's poll p99 to 187 ms (pages of 100) and
    # 1.6 s (pages of 1,000), and the API's RSS up 171 MiB, because every page parsed its results into Judgements in
    # a worker thread (holding the GIL the event loop needs) and serialised them again. A page is the stored JSON, as
    # the completion-order pages are: the worker validated it when it stored it.
    response = client.post("/v1/batches", json={"items": triples(12), "options": {"prompt": "answer_relevance@juiz-1"}})
    batch = response.json()
    run_worker(settings)
    completion = client.get(batch["links"]["results"], params={"limit": "100"}).json()["items"]

    def parse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an order=uncertain page re-parsed a stored result")

    monkeypatch.setattr(Judgement, "model_validate_json", parse)
    page = client.get(batch["links"]["results"], params={"order": "uncertain", "limit": "100"})

    assert page.status_code == 200, page.text
    assert page.json()["next_cursor"] is None
    assert sorted(page.json()["items"], key=lambda r: r["id"]) == sorted(completion, key=lambda r: r["id"])
    missing = client.get(f"/v1/batches/{'0' * 32}/results", params={"order": "uncertain"})
    assert missing.status_code == 404


def test_a_large_uncertain_page_reads_the_index_in_short_script_calls(
    client: TestClient[Litestar], settings: Settings, run_worker: Any, redis: Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script blocks Redis while it runs: one call for a page of 1,000 (a LINDEX each, ~10 ms on a 10k batch) made
    # another tenant's poll wait behind every reader's page (bench.uncertain_pages: p99 238 ms with 20 readers).
    items = triples(22, label=None)
    response = client.post("/v1/batches", json={"items": items, "options": {"prompt": "answer_relevance@juiz-1"}})
    batch = response.json()
    run_worker(settings)
    expected = [j.id for j in uncertain_first(Store(redis, settings).results_in_input_order(batch["id"]))]
    monkeypatch.setattr(batches, "UNCERTAIN_RANKS_PER_CALL", 4)
    spans: list[int] = []
    call = AsyncScript.__call__

    async def recording(self: AsyncScript, keys: Any = None, args: Any = None, client: Any = None) -> Any:
        if self.script == UNCERTAIN_PAGE:
            spans.append(int(args[1]) - int(args[0]) + 1)
        return await call(self, keys=keys, args=args, client=client)

    monkeypatch.setattr(AsyncScript, "__call__", recording)
    served: list[str] = []
    cursor: str | None = None
    while True:
        params = {"order": "uncertain", "limit": "10", **({"cursor": cursor} if cursor else {})}
        page = client.get(batch["links"]["results"], params=params).json()
        served += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert served == expected
    assert spans and max(spans) <= 4 and len(spans) >= 22 // 4
