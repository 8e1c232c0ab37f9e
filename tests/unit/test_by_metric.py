"""Agreement per metric and for the verdict, the CLI's --metric/--by-metric, and the report's metric lines, on results
graded by the FAKE engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from juiz.agreement.statistics import compute_agreement_by_metric, format_agreement_by_metric
from juiz.cli import build_parser, main
from juiz.engines.base import Conversation
from juiz.engines.fake import FakeEngine
from juiz.formats.readers import read_triples, write_judgements
from juiz.formats.report import render_report
from juiz.judging.judge import Judge
from schemas import BatchOptions, Judgement, LabelMapping, Segment, Triple

ALL = ["answer_relevance", "groundedness", "context_relevance"]
# The fake replies below are CoT grades (and the report shows the CoT text): these tests pin the CoT prompts, as the
# defaults for answer relevance and groundedness are check-based (checks-17, checks-8).
COT = {"answer_relevance": "answer_relevance@juiz-1", "groundedness": "groundedness@juiz-1"}
CONTEXT = [Segment(text="Paris is the capital of France.", source="geo.mp4"), Segment(text="Cows eat grass.")]


def cot(metrics: list[str] | None = None, **options: object) -> BatchOptions:
    """Options grading `metrics` (default: answer relevance alone) with the CoT prompts."""
    metrics = metrics or ["answer_relevance"]
    return BatchOptions.model_validate({"metrics": metrics, "prompt": [COT[m] for m in metrics if m in COT], **options})


def reply(conversation: Conversation) -> str:
    user = conversation[-1]["content"]
    if "<segment>" in user:
        return f"Criteria: c\nSupporting Evidence: s\nScore: {3 if 'Paris' in user else 0}"
    answer = user.split("<answer>")[-1]
    if "<context>" in user:  # groundedness: Lyon is not in the context
        return f"Criteria: c\nSupporting Evidence: Unsupported: x\nScore: {0 if 'Lyon' in answer else 3}"
    score = 0 if "know" in answer else 2 if "France" in answer else 3
    return f"Criteria: c\nSupporting Evidence: e\nScore: {score}"


def results() -> list[Judgement]:
    q = "What is the capital of France?"
    items = [
        Triple(id="c1", question=q, answer="Paris.", context=CONTEXT, manual_label="C"),
        Triple(id="c2", question=q, answer="It is Paris.", context=CONTEXT, manual_label="C"),
        Triple(id="p1", question=q, answer="A city in France.", context=CONTEXT, manual_label="P"),
        Triple(id="i1", question=q, answer="Lyon.", context=CONTEXT, manual_label="I"),
        Triple(id="i2", question=q, answer="I don't know.", context=CONTEXT, manual_label="I"),
    ]
    return Judge(FakeEngine(reply)).grade(items, cot(metrics=ALL))


def test_each_metric_and_the_verdict_side_by_side() -> None:
    report = compute_agreement_by_metric(results(), LabelMapping(), resamples=20)
    assert list(report.columns) == [
        "answer_relevance",
        "answer_relevance (expected)",
        "groundedness",
        "groundedness (expected)",
        "context_relevance",
        "context_relevance (expected)",
        "verdict",
        "verdict (expected)",
    ]
    # answer relevance alone calls Lyon C; the verdict (relevant AND grounded) gets every item right
    assert report.columns["answer_relevance"].accuracy.value == pytest.approx(4 / 5)
    assert report.columns["verdict"].accuracy.value == 1.0
    assert report.columns["verdict"].confusion_matrix == [[2, 0, 0], [0, 1, 0], [0, 0, 2]]
    # context relevance is the same for every item (same question, same segments): ranks nothing
    assert report.columns["context_relevance"].spearman_rho.value is None
    assert report.verdict is not None and report.verdict[0].label == "C"
    text = format_agreement_by_metric(report)
    assert "verdict: C if answer_relevance >= 2.5 and groundedness >= 2.5" in text
    assert text.splitlines()[0].split()[:2] == ["statistic", "answer_relevance"]


def test_no_verdict_column_without_groundedness() -> None:
    only_ar = Judge(FakeEngine(reply)).grade([Triple(question="Q?", answer="Paris.", manual_label="C")], cot())
    report = compute_agreement_by_metric(only_ar, LabelMapping(), resamples=0)
    assert list(report.columns) == ["answer_relevance", "answer_relevance (expected)"]
    assert report.verdict is None


def test_cli_metric_is_repeatable_and_agreement_by_metric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["score", "in.jsonl", "-o", "out.jsonl", "--metric", "groundedness"])
    assert args.metrics == ["groundedness"]  # --metric is an alias of the derived --metrics
    path = tmp_path / "results.jsonl"
    write_judgements(results(), path)
    assert main(["agreement", str(path), "--by-metric", "--resamples", "10"]) == 0
    out = capsys.readouterr().out
    assert "verdict (expected)" in out and "accuracy" in out
    assert main(["agreement", str(path), "--by-metric", "--json", "--resamples", "0"]) == 0
    assert "verdict" in json.loads(capsys.readouterr().out)["columns"]


def test_report_shows_the_verdict_each_metric_and_segment_relevance(tmp_path: Path) -> None:
    mapping = LabelMapping.model_validate(
        {"verdict": [{"label": "C", "when": {"answer_relevance": 3, "groundedness": 3}}]}
    )
    graded = Judge(FakeEngine(reply)).grade(
        [Triple(id="x", question="What is the capital of France?", answer="Lyon.", context=CONTEXT)],
        cot(metrics=ALL, label_mapping=mapping),
    )
    text = render_report(graded)
    assert "**Groundedness (G)**: 0.00" in text
    assert "**Context Relevance (CR)**: 1.00 (max of 2 segments)" in text
    assert "**Automated label**: I" in text  # the verdict: relevant but not grounded
    assert "**Reasoning (G CoT)**: Criteria: c Supporting Evidence: Unsupported: x Score: 0" in text
    first, second = text.split("- *Corpus ID:* geo.mp4")[1].split("- *Transcript:*")[:2]
    assert "- *Context Relevance:* 1.00" in first and "- *Context Relevance:* 0.00" in second
    # the report still reads back as the same triples
    path = tmp_path / "report.txt"
    path.write_text(text, encoding="utf-8")
    (back,) = read_triples(path)
    assert back.answer == "Lyon." and isinstance(back.context, list) and len(back.context) == 2
    assert back.context[0].text == "Paris is the capital of France."


def test_default_report_is_unchanged_without_context_metrics() -> None:
    graded = Judge(FakeEngine(reply)).grade([Triple(question="Q?", answer="Paris.", context=CONTEXT)])
    text = render_report(graded)
    assert "Groundedness" not in text and "Context Relevance" not in text


def test_the_seeds_are_graded_with_all_three_metrics() -> None:
    """The seeds' reports carry their retrieved segments, so every metric applies (FAKE engine: plumbing only)."""
    seeds = sorted((Path(__file__).resolve().parents[2] / "examples" / "seeds").glob("00*.txt"))
    triples = [t for path in seeds for t in read_triples(path)]
    graded = Judge(FakeEngine(reply)).grade(triples, cot(metrics=ALL))
    assert len(graded) == 3
    for result in graded:
        assert result.metrics is not None and list(result.metrics) == ALL
        assert all(m.status.value == "ok" for m in result.metrics.values())
        cr = result.metrics["context_relevance"]
        assert isinstance(result.context, list) and cr.segments is not None
        assert len(cr.segments) == len(result.context) > 1
        assert result.metrics["groundedness"].provenance is not None
        assert result.metrics["groundedness"].provenance.prompt == "groundedness@juiz-1.pt"
