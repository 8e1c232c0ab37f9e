"""`juiz compare` and the label sources of `juiz agreement` (labels files, consensus rules, the shares), offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juiz.cli import main
from juiz.formats.readers import write_judgements
from schemas import Judgement, JudgementStatus
from schemas.annotation import Annotation
from tests.unit.test_agreement import PROVENANCE

LABELS = "CCIPPCICCI"


def run(path: Path, scores: list[int | None], labels: str | None = LABELS, prefix: str = "t") -> Path:
    write_judgements(
        [
            Judgement(
                id=f"{prefix}{n}",
                status=JudgementStatus.OK if score is not None else JudgementStatus.FAILED,
                score=score,
                normalized_score=None if score is None else score / 3,
                manual_label=None if labels is None else labels[n],
                provenance=PROVENANCE,
                question=f"question {n}?",
                answer=f"answer {n}.",
            )
            for n, score in enumerate(scores)
        ],
        path,
    )
    return path


def test_compare_two_runs_as_text_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = run(tmp_path / "a.jsonl", [3, 3, 0, 2, 2, 3, 0, 0, 0, 3])  # wrong on t7, t8
    b = run(tmp_path / "b.jsonl", [3, 3, 0, 2, 2, 3, 3, 3, 3, 3], labels=None)  # fixes t7, t8; breaks t6
    assert main(["compare", str(a), str(b), "--resamples", "50"]) == 0
    text = capsys.readouterr().out
    assert f"{b} against {a}: 10 shared items (paired by id)" in text
    assert "fixed: t7, t8" in text and "regressed: t6" in text
    assert "McNemar (exact binomial): 1 items right only in a, 2 right only in b, p = 1" in text
    assert "each class's share, run b − run a" in text
    assert main(["compare", str(a), str(b), "--resamples", "50", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    comparison = report["comparisons"][0]
    assert comparison["differences"]["accuracy"]["difference"] == pytest.approx(0.1)
    assert comparison["differences"]["accuracy"]["ci95"] is not None
    assert (comparison["fixed"], comparison["regressed"]) == (["t7", "t8"], ["t6"])
    assert comparison["shares_difference"]["of"] == "difference"


def test_compare_pairs_fresh_ids_by_content_and_takes_three_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = run(tmp_path / "a.jsonl", [3] * 10)
    b = run(tmp_path / "b.jsonl", [3] * 9 + [0], labels=None, prefix="fresh-")
    c = run(tmp_path / "c.jsonl", [0] * 10, labels=None)
    assert main(["compare", str(a), str(b), str(c), "--resamples", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["baseline"] == str(a) and [r["graded"] for r in report["runs"]] == [10, 10, 10]
    first, second = report["comparisons"]
    assert (first["matched_by"], first["paired"], first["regressed"]) == ("content", 10, [])  # t9 is an I anyway
    assert (first["fixed"], second["matched_by"]) == (["t9"], "id")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["ONE"], "compare: needs two results files or more"),
        (["ONE", "EMPTY"], "EMPTY: nothing graded (0 items, none ok)"),
        (["ONE", "FAILED"], "FAILED: nothing graded (2 items, none ok)"),
        (["ONE", "ONE", "--consensus", "loudest"], "--consensus: unknown consensus rule 'loudest'"),
        (["ONE", "ONE", "--resamples", "-1"], "--resamples: must be 0"),
        (["ONE", "ONE", "--label-metric", "fluency"], "--label-metric: unknown metric; known: answer_relevance"),
        (["ONE", "missing.jsonl"], "no such file"),
    ],
)
def test_compare_refuses_with_a_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], message: str
) -> None:
    files = {
        "ONE": run(tmp_path / "one.jsonl", [3, 0]),
        "EMPTY": tmp_path / "empty.jsonl",
        "FAILED": run(tmp_path / "failed.jsonl", [None, None]),
    }
    files["EMPTY"].write_text("", encoding="utf-8")
    argv = [str(files[a]) if a in files else a for a in arguments]
    assert main(["compare", *argv]) == 2
    err = capsys.readouterr().err
    for name, path in files.items():
        message = message.replace(name, str(path))
    assert message in err and "Traceback" not in err


def test_agreement_with_annotators_a_labels_file_and_the_shares(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = run(tmp_path / "r.jsonl", [3, 3, 0, 2, 2, 3, 0, 0, 0, 3], labels=None)
    labels = tmp_path / "labels.jsonl"
    lines = [{"id": f"t{n}", "annotator": "alice", "label": LABELS[n]} for n in range(10)]
    lines += [{"id": f"t{n}", "annotator": "bob", "label": "C", "comment": "looks right"} for n in range(4)]
    lines.append({"id": "elsewhere", "annotator": "bob", "label": "C"})
    labels.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")

    assert main(["agreement", str(results), "--labels", str(labels), "--resamples", "20", "--no-calibration"]) == 0
    captured = capsys.readouterr()
    assert f"{labels}: 1 labels name no item of {results}" in captured.err
    assert "compared with: majority of the annotators' labels; a tie leaves the item out" in captured.out
    assert "Cohen's kappa alice / bob on 4 items" in captured.out and "2 tied (left out)" in captured.out
    assert "each class's share of the answers (prediction-powered: 10 items, 8 labelled items" in captured.out

    argv = ["agreement", str(results), "--labels", str(labels), "--resamples", "20", "--json", "--no-calibration"]
    assert main([*argv, "--consensus", "annotator:alice"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["reference"] == "annotator alice's label" and report["n"] == 10
    assert report["annotators"]["annotators"] == ["alice", "bob"] and report["annotators"]["consensus_items"] == 10
    assert [s["label"] for s in report["shares"]["shares"]] == ["I", "P", "C"]
    assert main([*argv, "--by-metric"]) == 0
    assert json.loads(capsys.readouterr().out)["annotators"]["items_shared"] == 4


def test_plain_manual_labels_stay_as_they_were(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = run(tmp_path / "r.jsonl", [3, 3, 0, 2, 2, 3, 0, 0, 0, 3])
    assert main(["agreement", str(results), "--resamples", "0", "--json", "--no-calibration"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["reference"], report["annotators"], report["n"]) == ("manual_label", None, 10)
    assert report["shares"]["n_labelled"] == 10


def test_annotations_in_the_results_are_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = run(tmp_path / "r.jsonl", [3, 0], labels=None)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows[0]["annotations"] = [Annotation(annotator=a, label="C").model_dump(mode="json") for a in ("ann", "ben")]
    rows[1]["annotations"] = [{"annotator": "ann", "label": "I", "at": "2026-11-27T10:00:00+00:00"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    assert main(["agreement", str(path), "--resamples", "0", "--json", "--no-calibration"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 2 and report["accuracy"]["value"] == 1.0
    assert report["annotators"]["labels"] == {"ann": 2, "ben": 1}
    assert report["annotators"]["krippendorff_alpha_ordinal"]["value"] is None  # the one shared item: C and C
