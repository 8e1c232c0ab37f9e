"""Comparing runs: pairing by id or by the triple's content, paired differences, McNemar's test, the verdicts that
moved, and runs with nothing graded."""

from __future__ import annotations

import math

import pytest

from juiz.agreement.compare import compare_experiment, compare_items, format_comparison
from juiz.agreement.mcnemar import mcnemar
from juiz.runtime.errors import InputError
from schemas.judgement import Judgement, JudgementStatus
from schemas.labels import LabelMapping
from schemas.triple import Segment, Triple, content_key
from tests.unit.test_agreement import PROVENANCE


def result(
    item: str,
    score: int | None,
    label: str | None = None,
    *,
    answer: str | None = None,
    status: JudgementStatus = JudgementStatus.OK,
) -> Judgement:
    return Judgement(
        id=item,
        status=status,
        score=score,
        normalized_score=None if score is None else score / 3,
        manual_label=label,
        provenance=PROVENANCE,
        question=f"question of {item.split('-')[-1]}?",
        answer=answer if answer is not None else f"answer {item.split('-')[-1]}.",
    )


def indexed(judgements: list[Judgement]) -> list[tuple[int, Judgement]]:
    return list(enumerate(judgements))


def test_the_triple_key_is_its_text_only() -> None:
    base = content_key("What?", "This.", [Segment(text="A fact.", source="doc-1", score=0.9)])
    assert base.startswith("t1:")
    # Ids, a segment's source and score, blank segments and the texts' outer blanks don't change the triple.
    assert content_key(" What?\n", "This. ", [Segment(text="A fact."), Segment(text="  ")]) == base
    assert content_key("What?", "This.", "A fact.") == base  # a string context is one segment
    assert content_key("What?", "This.", None) == content_key("What?", "This.", "") == content_key("What?", "This.", [])
    assert content_key("Qué?", "x", None) == content_key("Que\u0301?", "x", None)  # NFC
    assert content_key("What?", "That.", "A fact.") != base
    assert content_key("What?", "This.", "Another fact.") != base
    triple = Triple(id="mine", question="What?", answer="This.", context="A fact.")
    assert triple.content_key() == base
    assert result("x", 3).content_key() == Triple(question="question of x?", answer="answer x.").content_key()


def test_identical_runs_differ_by_nothing() -> None:
    runs = [result(f"t{i}", s, label) for i, (s, label) in enumerate(zip([3, 0, 2, 3, 1, 0], "CIPPPI", strict=True))]
    report = compare_items("a", indexed(runs), "b", indexed(runs), LabelMapping(), resamples=50)[0]
    assert report.matched_by == "id" and report.shared == report.paired == 6
    assert report.differences["accuracy"].difference == 0.0
    interval = report.differences["accuracy"].ci95
    assert interval is not None and interval.low == interval.high == 0.0  # paired: every resample differs by 0
    assert report.mcnemar is not None and report.mcnemar.p_value == 1.0
    assert report.unchanged == [f"t{i}" for i in range(6)] and not report.fixed and not report.regressed


def test_fixed_regressed_unchanged_sideways_and_the_paired_difference() -> None:
    labels = ["C", "C", "I", "P", "P", "C", "I", "C"]
    scores_a = [0, 3, 3, 0, 2, 2, 0, 3]
    scores_b = [3, 0, 0, 3, 2, 1, 0, 3]
    # t0 I→C toward C: fixed; t1 C→I: regressed; t2 C→I toward I: fixed; t3 I→C over a P: sideways; t4 P→P; t5 P→P
    # (scores 2 → 1, one class); t6, t7 unchanged.
    a = [result(f"t{i}", s, label) for i, (s, label) in enumerate(zip(scores_a, labels, strict=True))]
    b = [result(f"t{i}", s) for i, s in enumerate(scores_b)]  # b has no labels of its own: the triples are a's
    report = compare_items("a", indexed(a), "b", indexed(b), LabelMapping(), resamples=100)[0]
    assert report.fixed == ["t0", "t2"]
    assert report.regressed == ["t1"]
    assert report.sideways == ["t3"]
    assert report.unchanged == ["t4", "t5", "t6", "t7"]
    accuracy = report.differences["accuracy"]
    assert (accuracy.a, accuracy.b) == (4 / 8, 5 / 8)
    assert accuracy.difference == pytest.approx(1 / 8)
    assert accuracy.ci95 is not None and accuracy.ci95.low <= 1 / 8 <= accuracy.ci95.high
    assert report.agreement_b.accuracy.value == 5 / 8  # b was compared with a's labels
    # Right only in a: t1; right only in b: t0, t2. Exact: 2 × P(X ≤ 1 | 3, ½) = 1.
    assert report.mcnemar is not None
    assert (report.mcnemar.only_a_right, report.mcnemar.only_b_right) == (1, 2)
    assert report.mcnemar.p_value == pytest.approx(1.0)
    assert {i.id: i.movement for i in report.changed} == {
        "t0": "fixed",
        "t1": "regressed",
        "t2": "fixed",
        "t3": "sideways",
    }
    text = format_comparison(report)
    assert "fixed: t0, t2" in text and "regressed: t1" in text and "McNemar (exact binomial)" in text


def test_mcnemar_exact_below_25_discordant_and_chi_square_from_there() -> None:
    small = mcnemar([True] * 2 + [False] * 8 + [True] * 5, [False] * 2 + [True] * 8 + [True] * 5)
    assert (small.only_a_right, small.only_b_right, small.method) == (2, 8, "exact binomial")
    assert small.p_value == pytest.approx(2 * (1 + 10 + 45) / 1024)
    large = mcnemar([True] * 10 + [False] * 30, [False] * 10 + [True] * 30)
    assert large.method == "chi-square with continuity correction"
    assert large.statistic == pytest.approx((20 - 1) ** 2 / 40)
    assert large.p_value == pytest.approx(math.erfc(math.sqrt(large.statistic / 2)))
    assert mcnemar([], []).p_value == 1.0


def test_runs_with_other_ids_are_paired_by_content() -> None:
    a = [result(f"a-{i}", 3, "C") for i in range(4)]
    b = [result(f"b-{i}", 0 if i == 0 else 3) for i in range(4)]  # the same triples under fresh ids
    report = compare_items("a.jsonl", indexed(a), "b.jsonl", indexed(b), LabelMapping(), resamples=0)[0]
    assert (report.matched_by, report.shared, report.paired) == ("content", 4, 4)
    assert report.regressed == ["a-0"]
    with pytest.raises(InputError, match="pairing by content"):
        bare = [(0, Judgement.model_construct(id="x", status=JudgementStatus.OK, score=3))]
        compare_items("a", bare, "b", bare, LabelMapping(), resamples=0, match="content")


def test_another_answer_keeps_its_own_label() -> None:
    a = [result("t0", 3, "C"), result("t1", 3, "C"), result("t2", 0, "I")]
    b = [result("t0", 0, "I", answer="a worse answer."), result("t1", 3), result("t2", 0)]
    report = compare_items("a", indexed(a), "b", indexed(b), LabelMapping(), resamples=0, shares=True)[0]
    assert report.unchanged == ["t0", "t1", "t2"]  # t0: b's answer is an I, and b says so
    assert report.agreement_b.accuracy.value == 1.0
    t0 = next(i for i in report.changed if i.id == "t0")
    assert (t0.manual_label, t0.manual_label_b) == ("C", "I")
    assert report.shares_difference is not None and report.shares_difference.of == "difference"
    share_c = next(s for s in report.shares_difference.shares if s.label == "C")
    assert share_c.estimate == pytest.approx(-1 / 3)  # every question labelled in both: the labels' own change


def test_a_run_with_nothing_graded_is_refused() -> None:
    good = indexed([result("t0", 3, "C")])
    failed = indexed([result("t0", None, status=JudgementStatus.FAILED)])
    with pytest.raises(InputError, match="nothing graded") as raised:
        compare_items("a", good, "cancelled", failed, LabelMapping(), resamples=0)
    assert raised.value.source == "cancelled"
    with pytest.raises(InputError, match="nothing graded"):
        compare_items("empty", [], "a", good, LabelMapping(), resamples=0)


def test_three_runs_each_against_the_baseline() -> None:
    labels = "CCIPPCIC"
    base = [result(f"t{i}", 3, label) for i, label in enumerate(labels)]
    better = [result(f"t{i}", {"C": 3, "P": 2, "I": 0}[label]) for i, label in enumerate(labels)]
    worse = [result(f"t{i}", 0) for i in range(8)]
    report = compare_experiment(
        [("base", indexed(base)), ("better", indexed(better)), ("worse", indexed(worse))],
        LabelMapping(),
        resamples=20,
    )
    assert report.baseline == "base" and [r.id for r in report.runs] == ["base", "better", "worse"]
    assert [(c.a, c.b) for c in report.comparisons] == [("base", "better"), ("base", "worse")]
    assert report.comparisons[0].differences["accuracy"].difference == pytest.approx(4 / 8)
    assert report.comparisons[1].differences["accuracy"].difference == pytest.approx(-2 / 8)
    with pytest.raises(InputError, match="two runs or more"):
        compare_experiment([("base", indexed(base))], LabelMapping(), resamples=0)
