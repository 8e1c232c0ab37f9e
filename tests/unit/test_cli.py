"""The CLI's error handling and its offline subcommands (no engine is started here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juiz.cli import main
from juiz.formats.readers import write_judgements
from schemas import Judgement, JudgementStatus, Provenance

PROVENANCE = Provenance(
    model="fake", prompt="answer_relevance@juiz-1.en", prompt_sha256="0" * 64, sampling={}, juiz_version="t"
)


def _judgement(i: int, score: int, label: str) -> Judgement:
    return Judgement(
        id=f"q{i}",
        status=JudgementStatus.OK,
        score=score,
        normalized_score=score / 3,
        question=f"Q{i}?",
        answer="A.",
        manual_label=label,
        automated_label="C" if score == 3 else ("I" if score == 0 else "P"),
        criteria="c",
        supporting_evidence="e",
        provenance=PROVENANCE,
    )


def test_bad_input_is_one_message_with_file_line_and_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "in.jsonl"
    bad.write_text('{"question": "Q?", "answer": "A"}\n{"answer": "no question"}\n', encoding="utf-8")
    code = main(["score", str(bad), "-o", str(tmp_path / "out.jsonl")])
    err = capsys.readouterr().err
    assert code == 2
    assert f"{bad}:2" in err and "question" in err
    assert "Traceback" not in err
    assert not (tmp_path / "out.jsonl").exists()


def test_missing_input_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["score", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o.jsonl")])
    assert code == 2 and "nope.jsonl" in capsys.readouterr().err


def test_unknown_prompt_fails_before_loading_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "in.jsonl"
    good.write_text('{"question": "Q?", "answer": "A"}\n', encoding="utf-8")
    code = main(["score", str(good), "-o", str(tmp_path / "o.jsonl"), "--prompt", "answer_relevance@nope-1"])
    err = capsys.readouterr().err
    assert code == 1 and "nope-1" in err and "loading" not in err


def test_missing_model_path_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / "in.jsonl"
    good.write_text('{"question": "Q?", "answer": "A"}\n', encoding="utf-8")
    code = main(["score", str(good), "-o", str(tmp_path / "o.jsonl"), "--model", str(tmp_path / "no-model")])
    err = capsys.readouterr().err
    assert code == 1 and str(tmp_path / "no-model") in err and "Traceback" not in err


def test_agreement_and_report_from_a_results_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "out.jsonl"
    write_judgements(
        [_judgement(1, 3, "C"), _judgement(2, 0, "I"), _judgement(3, 2, "C"), _judgement(4, 1, "P")], results
    )
    assert main(["agreement", str(results), "--resamples", "50"]) == 0
    table = capsys.readouterr().out
    assert "accuracy" in table.lower() and "kappa" in table.lower()
    assert main(["agreement", str(results), "--json", "--resamples", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 4 and report["accuracy"]["value"] == pytest.approx(0.75)
    md = tmp_path / "report.md"
    assert main(["report", str(results), "-o", str(md)]) == 0
    text = md.read_text(encoding="utf-8")  # graded with English prompts: English headings
    assert "**Answer Relevance (AR)**: 1.00" in text and "**Manual label**: C" in text
    assert main(["report", str(results), "-o", str(md), "--lang", "pt"]) == 0
    assert "**Anotação manual**: C" in md.read_text(encoding="utf-8")  # the seeds' Portuguese, asked for


def test_agreement_with_a_custom_label_mapping(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "out.jsonl"
    write_judgements(
        [_judgement(1, 3, "Y"), _judgement(2, 0, "N"), _judgement(3, 2, "Y"), _judgement(4, 1, "Y")], results
    )
    mapping = '{"classes": [{"name": "N", "scores": [0, 1]}, {"name": "Y", "scores": [2, 3]}]}'
    assert main(["agreement", str(results), "--json", "--resamples", "50", "--label-mapping", mapping]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 4 and report["accuracy"]["value"] == pytest.approx(0.75)
    mapping_file = tmp_path / "mapping.json"
    mapping_file.write_text(mapping, encoding="utf-8")
    assert main(["agreement", str(results), "--json", "--resamples", "50", "--label-mapping", str(mapping_file)]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"]["value"] == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('{"classes": [{"name": "N", "scores": [0]}, {"name": "Y", "scores": [2, 3]}]}', "cover the scores"),
        ("{not json", "--label-mapping"),
        ("no-such-file.json", "not inline JSON and not a readable file"),
    ],
)
def test_a_bad_label_mapping_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, expected: str
) -> None:
    results = tmp_path / "out.jsonl"
    write_judgements([_judgement(1, 3, "C")], results)
    code = main(["agreement", str(results), "--label-mapping", value])
    err = capsys.readouterr().err
    assert code == 2 and "--label-mapping" in err and expected in err and "Traceback" not in err
