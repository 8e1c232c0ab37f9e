"""`juiz calibrate`, `juiz agreement` with calibrated figures and uncertain items, `juiz score --calibration
--samples --uncertain-first` (a FAKE engine stands in for the model)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from juiz.cli import main
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.formats.readers import read_judgements, write_judgements
from juiz.judging import backend
from schemas import Judgement, JudgementStatus, Provenance
from schemas.calibration import CalibrationSpec
from schemas.judgement import MetricResult, MetricStatus

PROVENANCE = Provenance(
    model="fake", prompt="answer_relevance@juiz-1.en", prompt_sha256="", sampling={}, juiz_version="t"
)


def _labelled(tmp_path: Path) -> Path:
    """An overconfident judge: 3 everywhere, its expected score ranking I < P < C."""
    rng = np.random.default_rng(0)
    results: list[Judgement] = []
    for label, centre in (("I", 0.3), ("P", 0.55), ("C", 0.85)):
        for _ in range(8):
            expected = float(np.clip(centre + rng.normal(0, 0.05), 0, 1))
            metric = MetricResult(status=MetricStatus.OK, score=3, expected_score=expected, provenance=PROVENANCE)
            results.append(
                Judgement(
                    id=f"q{len(results)}",
                    status=JudgementStatus.OK,
                    score=3,
                    normalized_score=1.0,
                    expected_score=expected,
                    question="Q?",
                    answer="A.",
                    manual_label=label,
                    provenance=PROVENANCE,
                    metrics={"answer_relevance": metric},
                )
            )
    path = tmp_path / "labelled.jsonl"
    write_judgements(results, path)
    return path


def test_calibrate_writes_a_checked_file_and_prints_raw_vs_calibrated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "calibration.json"
    assert main(["calibrate", str(_labelled(tmp_path)), "-o", str(out), "--resamples", "20"]) == 0
    spec = CalibrationSpec.model_validate_json(out.read_text())
    assert spec.features == ["answer_relevance.expected_score"] and spec.cross_fitted["n"] == 24
    printed = capsys.readouterr().out
    assert "calibrated" in printed and "Brier score" in printed and spec.id in printed


def test_calibrate_refuses_degenerate_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _labelled(tmp_path)
    lines = path.read_text().splitlines()[:6]
    path.write_text("\n".join(lines) + "\n")
    assert main(["calibrate", str(path), "-o", str(tmp_path / "c.json")]) == 2
    assert "cannot calibrate" in capsys.readouterr().err and not (tmp_path / "c.json").exists()


def test_agreement_shows_calibrated_figures_and_uncertain_items(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _labelled(tmp_path)
    assert main(["agreement", str(path), "--resamples", "20", "--uncertain-first", "3"]) == 0
    printed = capsys.readouterr().out
    assert "calibration on 24 labelled items" in printed and "reliability" in printed
    assert "most uncertain first" in printed
    assert main(["agreement", str(path), "--resamples", "20", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["calibration"]["calibrated"]["n"] == 24
    assert main(["agreement", str(path), "--resamples", "20", "--no-calibration", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["calibration"] is None


# CoT samples (--samples 3) are what the next test's replies disagree on: it pins the CoT prompt (the default checks
# read probabilities and draws no samples).
COT = ["--prompt", "answer_relevance@juiz-1"]


def test_score_applies_a_calibration_and_lists_uncertain_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = tmp_path / "calibration.json"
    assert main(["calibrate", str(_labelled(tmp_path)), "-o", str(calibration), "--resamples", "0"]) == 0
    scores = iter([3, 3, 3, 0, 2, 1])  # item a: three 3s; item b: 0, 2, 1

    def reply(conversation: Conversation) -> str:
        return f"Criteria: c\nSupporting Evidence: e\nScore: {next(scores)}"

    monkeypatch.setattr(backend, "build_engine", lambda *args, **kwargs: FakeEngine(reply))
    items = tmp_path / "items.jsonl"
    items.write_text(
        '{"id": "a", "question": "Q1?", "answer": "A1."}\n{"id": "b", "question": "Q2?", "answer": "A2."}\n'
    )
    out = tmp_path / "results.jsonl"
    argv = ["score", str(items), "-o", str(out), "--samples", "3", "--calibration", str(calibration), *COT]
    assert main([*argv, "--uncertain-first", "--batch-size", "1"]) == 0
    results = read_judgements(out)
    assert [r.id for r in results] == ["b", "a"]  # b's replies disagree
    assert results[0].uncertain is True and results[0].samples is not None and results[0].samples.scores == [0, 2, 1]
    assert all(r.calibrated is not None and r.calibrated.label for r in results)
    assert all(r.provenance.calibration is not None for r in results)


def test_score_refuses_an_altered_calibration_before_loading_a_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calibration = tmp_path / "calibration.json"
    assert main(["calibrate", str(_labelled(tmp_path)), "-o", str(calibration), "--resamples", "0"]) == 0
    data = json.loads(calibration.read_text())
    data["model"]["coef"][0][0] += 1
    calibration.write_text(json.dumps(data))
    items = tmp_path / "items.jsonl"
    items.write_text('{"question": "Q?", "answer": "A."}\n')
    code = main(["score", str(items), "-o", str(tmp_path / "r.jsonl"), "--calibration", str(calibration)])
    assert code == 2
    assert "altered" in capsys.readouterr().err


def test_agreement_scores_a_saved_calibration_on_other_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    labelled = _labelled(tmp_path)
    calibration = tmp_path / "calibration.json"
    assert main(["calibrate", str(labelled), "-o", str(calibration), "--resamples", "0"]) == 0
    capsys.readouterr()
    argv = ["agreement", str(labelled), "--no-calibration", "--resamples", "0", "--calibration", str(calibration)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "on 24 of 24 items" in printed and "accuracy: raw 0.333, calibrated" in printed
