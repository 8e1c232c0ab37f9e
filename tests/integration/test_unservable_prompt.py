"""A prompt that can't be served when a worker grades (its file removed after intake) fails only the items that asked
for it: items of other batches sharing the same engine call are graded. Real Redis, a real RQ worker on the FAKE
engine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import TestClient

import prompts
from juiz.judging import plan
from juiz.runtime.errors import PromptError
from juiz.runtime.settings import Settings
from schemas import BatchOptions
from tests.integration.helpers import make_settings, triples

REMOVED = "juiz-1"


def test_an_unservable_prompt_fails_its_own_items_and_no_one_elses(
    make_client: Callable[[Settings], TestClient[Litestar]],
    redis_url: str,
    run_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = make_settings(redis_url, coalesce_max_items=16)  # both batches' chunks in one job's call
    client = make_client(settings)
    plain = client.post("/v1/batches", json={"items": triples(3)}).json()
    options = {"metrics": ["answer_relevance"], "mode": "fast", "prompt": [f"answer_relevance@{REMOVED}"]}
    orphan = client.post("/v1/batches", json={"items": triples(3, start=3), "options": options}).json()
    choose = plan._prompt_in

    def removed_after_intake(options: BatchOptions, metric: str, item_lang: str) -> prompts.PromptTemplate:
        # Where the worker and the judge choose an item's prompt (the FAKE engine reads the prompt files itself).
        if any(REMOVED in prompt_id for prompt_id in options.prompt_ids()):
            raise PromptError(f"no prompt answer_relevance@{REMOVED}.{item_lang}")
        return choose(options, metric, item_lang)

    monkeypatch.setattr(plan, "_prompt_in", removed_after_intake)
    run_worker(settings)

    def statuses(batch: dict[str, Any]) -> list[tuple[str, str | None]]:
        items = client.get(batch["links"]["results"]).json()["items"]
        return [(r["status"], r.get("error")) for r in items]

    assert [status for status, _ in statuses(plain)] == ["ok"] * 3, statuses(plain)
    failed = statuses(orphan)
    assert [status for status, _ in failed] == ["failed"] * 3
    assert all(REMOVED in (error or "") for _, error in failed), failed
