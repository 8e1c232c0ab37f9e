"""bench.calibration_quality on the FAKE engine: calibration held out two ways, sampled replies, hostile pairs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import bench.calibration_quality as cq
import bench.labelled as labelled
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from schemas import Judgement, JudgementStatus, Provenance, Triple

SCORES = {"I": 0, "P": 2, "C": 3}


def reply(conversation: Conversation) -> str:
    """A FAKE judge that mostly says 3 and otherwise a digit fixed by the prompt's text: noisy, deterministic."""
    user = conversation[-1]["content"]
    digit = int(hashlib.sha256(user.encode()).hexdigest(), 16) % 6
    return f"Criteria: c\nSupporting Evidence: e\nScore: {min(digit, 3)}"


def test_calibration_quality_runs_on_the_fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUIZ_BENCH_RESULTS", str(tmp_path))
    monkeypatch.setattr(labelled, "WORK", tmp_path)  # the judgements it keeps: not the real runs' folder
    monkeypatch.setattr(cq, "load_engine", lambda model: FakeEngine(reply, model_id="FAKE"))
    monkeypatch.setattr(cq, "close_engine", lambda engine: None)
    assert cq.main(["--limit", "60", "--samples", "1,3", "--samples-limit", "8"]) == 0
    result = json.loads((tmp_path / "calibration_quality.json").read_text())
    calibration = result["calibration"]
    assert calibration["raw_signal"] == "verdict"
    crossed, held_out = calibration["cross_fitted_test"], calibration["dev_to_test"]
    assert crossed["features"] == ["answer_relevance.expected_score", "groundedness.expected_score"]
    assert crossed["raw"]["n"] == crossed["calibrated"]["n"] == 60
    assert held_out["fit_on"] == 60 and held_out["calibrated"]["n"] == 60
    assert set(held_out["targets"]) == {"kappa_gain>=0.1", "ece<=0.1"}
    assert [row["n"] for row in result["samples"]] == [1, 3]
    assert result["samples"][1]["mean_majority_share"] is not None and result["samples"][1]["temperature"] == 0.7
    assert result["hostile_pairs"]["score"]["pairs"] > 0


def _item(item_id: str, twin: str | None = None) -> Triple:
    return Triple.model_validate({"id": item_id, "question": "q", "answer": "a", "twin_of": twin})


def _result(item_id: str, score: int) -> Judgement:
    provenance = Provenance(model="m", prompt="p", prompt_sha256="", sampling={}, juiz_version="0")
    return Judgement(
        id=item_id, status=JudgementStatus.OK, score=score, question="q", answer="a", provenance=provenance
    )


def test_hostile_pairs_by_hand() -> None:
    triples = [_item("t-q1-a0"), _item("t-q1-a4", "t-q1-a0"), _item("t-q2-a1"), _item("t-q2-a5", "t-q2-a1")]
    results = [_result("t-q1-a0", 2), _result("t-q1-a4", 3), _result("t-q2-a1", 3), _result("t-q2-a5", 0)]
    pairs = cq.hostile_pairs(triples, results, lambda j: None if j.score is None else float(j.score))
    assert pairs == {"pairs": 2, "not_comparable": 0, "max": 1.0, "mean": -1.0, "above_twin": 1}


def test_judge_quality_gains_calibration_samples_and_hostile_pairs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bench.judge_quality as jq

    monkeypatch.setenv("JUIZ_BENCH_RESULTS", str(tmp_path))
    monkeypatch.setattr(jq, "load_judge_engine", lambda model, engine: FakeEngine(reply, model_id="FAKE"))
    monkeypatch.setattr(jq, "close_engine", lambda engine: None)
    argv = ["--limit", "60", "--cells", "cot-v2", "--no-golden", "--calibration", "--samples", "1,3"]
    assert jq.main([*argv, "--samples-limit", "6"]) == 0
    (written,) = tmp_path.glob("judge_quality_test_limit60_*.json")
    result = json.loads(written.read_text())
    section = result["calibration"]["cot-v2"]
    assert section["dev_to_test"]["fit_on"] == 60 and section["cross_fitted_test"]["calibrated"]["n"] == 60
    assert [row["n"] for row in result["samples"]["rows"]] == [1, 3]
    assert result["hostile_pairs"]["cot-v2"]["score"]["pairs"] > 0
    # The same figures again from the results file alone (no grading): `--from-results`.
    assert cq.main(["--from-results", str(written), "--cell", "cot-v2"]) == 0
    offline = json.loads((tmp_path / "calibration_quality_cot-v2_from_results.json").read_text())
    assert offline["calibration"]["cross_fitted_test"] == section["cross_fitted_test"]
    assert offline["hostile_pairs"]["score"] == result["hostile_pairs"]["cot-v2"]["score"]
