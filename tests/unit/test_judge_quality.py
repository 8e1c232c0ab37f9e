"""bench.judge_quality end to end on the FAKE engine: every figure computed and written, no model involved."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import bench.judge_quality as jq
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine


def reply(conversation: Conversation) -> str:
    user = conversation[-1]["content"]
    return "2" if "digit" in user or "dígito" in user else "Criteria: c\nSupporting Evidence: e\nScore: 3"


def test_judge_quality_runs_on_the_fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUIZ_BENCH_RESULTS", str(tmp_path))
    monkeypatch.setattr(jq, "load_judge_engine", lambda model, engine: FakeEngine(reply, model_id="FAKE"))
    monkeypatch.setattr(jq, "close_engine", lambda engine: None)
    assert jq.main(["--split", "dev", "--limit", "30", "--cells", "cot-v2,fast-v2"]) == 0
    (written,) = tmp_path.glob("judge_quality_dev_limit30_*.json")
    result = json.loads(written.read_text())
    rows = {(r["cell"], r["metric"], r["signal"]): r for r in result["rows"]}
    verdict = rows[("cot-v2", "verdict", "score")]
    assert verdict["n"] == 30 and verdict["parse_errors"] == 0
    # a judge that says 3 to everything: every correct answer C, no refusal or injected answer I
    assert verdict["correct_as_C"] == 1.0 and verdict["refusal_injected_as_I"] == 0.0
    assert rows[("fast-v2", "context_relevance", "score")]["per_segment"]["segments"] > 0
    # where the cost goes: each engine call, and the uncached prompt tokens by kind of conversation
    assert verdict["engine_calls_s"] and all(call["conversations"] > 0 for call in verdict["engine_calls_s"])
    assert any(kind.startswith("up to ") for kind in verdict["uncached_prompt_tokens_per_item_by_kind"])
    if jq.GOLDEN.exists():  # TruLens's golden set lives in ../shared, beside the clone, not in the repo
        assert result["golden"] and result["golden"][0]["n"] == 17
    else:
        assert result["golden"] == []
