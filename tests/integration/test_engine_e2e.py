"""End to end through HTTP with the engine `JUIZ_ENGINE=auto` picks (SmolLM2-135M): submit → real worker → results
over the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from juiz.engines.models import TEST_MODEL
from juiz.formats.readers import read_triples
from tests.integration.helpers import make_settings, triples

pytestmark = pytest.mark.engine


def test_seeds_graded_through_the_api_by_a_real_engine(
    tiny_judge_engine: Any, make_client: Any, redis_url: str, redis: Redis, run_worker: Any, seeds_dir: Path
) -> None:
    settings = make_settings(redis_url, model=TEST_MODEL, chunk_size=2, coalesce_max_items=8, job_timeout_s=600)
    client = make_client(settings)
    seeds = [
        t.model_dump(mode="json", exclude_none=True) for p in sorted(seeds_dir.glob("00*.txt")) for t in read_triples(p)
    ]
    items = seeds + triples(2)
    # CoT pinned: this checks the reply grammar end to end (check prompts: tests/engine/test_vllm_engine.py).
    options = {"prompt": "answer_relevance@juiz-1"}
    batch = client.post("/v1/batches", json={"items": items, "options": options}).json()

    run_worker(settings, worker_engine=tiny_judge_engine)

    view = client.get(batch["links"]["self"]).json()
    assert view["status"] == "done" and view["counts"]["done"] == len(items)
    results = client.get(batch["links"]["results"], params={"limit": 100}).json()["items"]
    assert sorted(r["id"] for r in results) == sorted(i["id"] for i in items)
    for result in results:
        assert result["status"] == "ok", result  # the grammar-constrained reply always parses
        assert 0 <= result["score"] <= 3 and result["raw_output"].startswith("Criteria: ")
        provenance = result["provenance"]
        assert provenance["model"] == TEST_MODEL
        assert provenance["prompt"].startswith("answer_relevance@") and len(provenance["prompt_sha256"]) == 64
        assert provenance["sampling"]["temperature"] == 0.0 and provenance["sampling"]["mode"] == "cot"
    seeded = {r["id"]: r for r in results}
    assert seeded["q43"]["provenance"]["prompt"].endswith(".pt")  # the seeds are Portuguese
    assert "**Pergunta 43**" in client.get(batch["links"]["report"]).text
    # Every item graded ok, so the report compares every item that carries a manual label (seeds and triples alike).
    labelled = sum(1 for item in items if item.get("manual_label") is not None)
    assert labelled > 0
    assert client.get(batch["links"]["agreement"], params={"resamples": 20}).json()["n"] == labelled
