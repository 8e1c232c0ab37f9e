"""Agreement statistics against figures worked out by hand, and the degenerate cases that must not crash."""

from __future__ import annotations

import math
import warnings

import pytest

from juiz.agreement.statistics import compute_agreement, format_agreement
from juiz.runtime.errors import InputError
from schemas.agreement import AgreementReport
from schemas.judgement import Judgement, JudgementStatus
from schemas.labels import LabelMapping

RESAMPLES = 200
STATISTICS = (
    "accuracy",
    "cohen_kappa",
    "cohen_kappa_quadratic",
    "krippendorff_alpha_ordinal",
    "spearman_rho",
    "kendall_tau",
    "mae",
)
PROVENANCE = {
    "model": "tiny",
    "prompt": "answer_relevance@juiz-1.en",
    "prompt_sha256": "0" * 64,
    "sampling": {},
    "juiz_version": "0.1.0",
}


def judgement(
    index: int,
    label: str | int | float | None,
    score: int | None,
    status: JudgementStatus = JudgementStatus.OK,
) -> Judgement:
    return Judgement(
        id=f"item-{index}",
        status=status,
        score=score,
        normalized_score=None if score is None else score / 3,
        manual_label=label,
        provenance=PROVENANCE,
        question="q?",
        answer="a.",
    )


def judgements(labels: list[str | int | float | None], scores: list[int | None]) -> list[Judgement]:
    return [judgement(i, label, score) for i, (label, score) in enumerate(zip(labels, scores, strict=True))]


def agreement(items: list[Judgement], **options: int) -> AgreementReport:
    return compute_agreement(items, LabelMapping(), resamples=options.pop("resamples", RESAMPLES), **options)


def test_six_items_match_the_hand_computation() -> None:
    # manual: I I P P C C      judge scores: 0 1 1 3 3 3  →  judge classes: I P P C C C
    #
    # Confusion (rows manual, cols judge):     I  P  C   | row
    #                                    I     1  1  0   |  2
    #                                    P     0  1  1   |  2
    #                                    C     0  0  2   |  2
    #                                  col     1  2  3   |  6
    # accuracy = p_o = (1 + 1 + 2) / 6 = 2/3
    # p_e = Σ row·col / n² = (2·1 + 2·2 + 2·3) / 36 = 12/36 = 1/3
    # kappa = (p_o − p_e) / (1 − p_e) = (1/3) / (2/3) = 0.5
    #
    # Quadratic: disagreement weights w = (i − j)²; kappa_q = 1 − Σ w·O / Σ w·E, E = row·col / n.
    # Σ w·O = 1·O[I,P] + 1·O[P,C] = 2
    # Σ w·E = (2/6)·[row I: 1·2 + 4·3 = 14, row P: 1·1 + 1·3 = 4, row C: 4·1 + 1·2 = 6] = (2/6)·24 = 8
    # kappa_q = 1 − 2/8 = 0.75
    #
    # Krippendorff ordinal: coincidences o (each unit adds both ordered pairs):
    #   o = [[2,1,0],[1,2,1],[0,1,4]], n_c = (3, 4, 5), n = 12
    #   δ²(c,k) = (Σ_{g=c..k} n_g − (n_c + n_k)/2)²: δ²(I,P) = 3.5² = 12.25, δ²(P,C) = 4.5² = 20.25, δ²(I,C) = 8² = 64
    #   Σ o·δ² = 2·12.25 + 2·20.25 = 65;  Σ n_c·n_k·δ² = 2·(3·4·12.25 + 4·5·20.25 + 3·5·64) = 3024
    #   alpha = 1 − (n − 1)·65 / 3024 = 1 − 715/3024 = 2309/3024 ≈ 0.76356
    #
    # Spearman between manual class (0 0 1 1 2 2) and score (0 1 1 3 3 3):
    #   ranks 1.5 1.5 3.5 3.5 5.5 5.5 and 1 2.5 2.5 5 5 5
    #   deviations from the mean rank 3.5: (−2 −2 0 0 2 2) and (−2.5 −1 −1 1.5 1.5 1.5)
    #   rho = 13 / √(16·15) = 13/√240 ≈ 0.83915
    # Kendall tau-b: 15 pairs, 9 concordant, 0 discordant, 3 tied in manual, 4 tied in score
    #   tau_b = 9 / √((15 − 3)(15 − 4)) = 9/√132 ≈ 0.78335
    #
    # MAE on 0–1: manual 0 0 .5 .5 1 1 vs judge 0 1/3 1/3 1 1 1 → (0 + 1/3 + 1/6 + 1/2 + 0 + 0) / 6 = 1/6
    report = agreement(judgements(["I", "I", "P", "P", "C", "C"], [0, 1, 1, 3, 3, 3]))

    assert report.n == 6
    assert report.classes == ["I", "P", "C"]
    assert report.confusion_matrix == [[1, 1, 0], [0, 1, 1], [0, 0, 2]]
    assert report.accuracy.value == pytest.approx(2 / 3)
    assert report.cohen_kappa.value == pytest.approx(0.5)
    assert report.cohen_kappa_quadratic.value == pytest.approx(0.75)
    assert report.krippendorff_alpha_ordinal.value == pytest.approx(2309 / 3024)
    assert report.spearman_rho.value == pytest.approx(13 / math.sqrt(240))
    assert report.kendall_tau.value == pytest.approx(9 / math.sqrt(132))
    assert report.mae.value == pytest.approx(1 / 6)
    assert report.bootstrap.resamples == RESAMPLES
    assert report.bootstrap.seed == 0


def test_perfect_agreement() -> None:
    report = agreement(judgements(["I", "P", "PC", "C", "C"], [0, 1, 2, 3, 3]))

    assert report.accuracy.value == 1.0
    assert report.cohen_kappa.value == pytest.approx(1.0)
    assert report.cohen_kappa_quadratic.value == pytest.approx(1.0)
    assert report.krippendorff_alpha_ordinal.value == pytest.approx(1.0)
    assert report.confusion_matrix == [[1, 0, 0], [0, 2, 0], [0, 0, 2]]
    # P stands for 0.5, the judge said 1/3 and 2/3: MAE = (1/6 + 1/6) / 5
    assert report.mae.value == pytest.approx(1 / 15)


def test_numeric_labels_on_the_unit_scale() -> None:
    # 0.5 makes auto read the labels as 0–1: classes I P C, judge 0 2 3 agrees on all three.
    report = agreement(judgements([0, 0.5, 1], [0, 2, 3]))

    assert report.accuracy.value == 1.0
    assert report.mae.value == pytest.approx(abs(0.5 - 2 / 3) / 3)


def test_no_items() -> None:
    report = agreement([])

    assert report.n == 0
    assert report.confusion_matrix == [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
    for name in STATISTICS:
        statistic = getattr(report, name)
        assert statistic.value is None
        assert statistic.ci95 is None
        assert statistic.reason == "no items to compare"


def test_one_item() -> None:
    report = agreement(judgements(["C"], [2]))

    assert report.n == 1
    assert report.accuracy.value == 0.0
    assert report.mae.value == pytest.approx(1 / 3)
    assert report.accuracy.ci95 is None  # one item gives no spread to resample
    for name in ("cohen_kappa", "cohen_kappa_quadratic", "krippendorff_alpha_ordinal", "spearman_rho", "kendall_tau"):
        assert getattr(report, name).value is None
        assert getattr(report, name).reason == "n < 2"


def test_one_class_on_both_sides_gives_reasons_not_nan_or_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = agreement(judgements(["C", "C", "correct", "C"], [3, 3, 3, 3]))

    assert report.accuracy.value == 1.0
    assert report.mae.value == 0.0
    for name in ("cohen_kappa", "cohen_kappa_quadratic", "krippendorff_alpha_ordinal"):
        assert getattr(report, name).value is None
        assert getattr(report, name).reason == "only one class present"
    for name in ("spearman_rho", "kendall_tau"):
        assert getattr(report, name).value is None
        assert "constant input" in (getattr(report, name).reason or "")
    assert "NaN" not in report.model_dump_json()


def test_constant_judge_scores_only_undefine_the_rank_correlations() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        report = agreement(judgements(["I", "P", "C", "C"], [3, 3, 3, 3]))

    # p_o = 2/4, judge column all C so p_e = (2/4)·1 = 1/2 → kappa = 0
    assert report.cohen_kappa.value == pytest.approx(0.0)
    assert report.spearman_rho.value is None
    assert report.spearman_rho.reason == "constant input: judge scores are all the same"
    assert report.kendall_tau.value is None


def test_items_without_label_or_ok_status_are_excluded_and_counted() -> None:
    items = [
        judgement(0, "C", 3),
        judgement(1, "I", 0),
        judgement(2, "P", 2),
        judgement(3, None, 3),
        judgement(4, "C", None, JudgementStatus.PARSE_ERROR),
        judgement(5, "I", None, JudgementStatus.FAILED),
        judgement(6, None, None, JudgementStatus.PARSE_ERROR),
        judgement(7, "not a label", None, JudgementStatus.FAILED),  # excluded, so its label is never read
    ]

    report = agreement(items)

    assert report.n == 3
    assert report.n_excluded == {"no_manual_label": 2, "not_ok": 3}
    assert sum(map(sum, report.confusion_matrix)) == 3
    assert report.accuracy.value == 1.0


def test_unknown_label_is_an_input_error_naming_the_item() -> None:
    with pytest.raises(InputError) as caught:
        agreement(judgements(["C", "maybe"], [3, 1]))

    assert caught.value.field == "manual_label"
    assert "item-1" in caught.value.message
    assert "'maybe'" in caught.value.message


def test_confidence_intervals_contain_the_estimate_and_are_reproducible() -> None:
    items = judgements(["I", "I", "P", "P", "C", "C"] * 5, [0, 1, 1, 3, 3, 3] * 5)

    report = agreement(items, seed=7)

    for name in STATISTICS:
        statistic = getattr(report, name)
        assert statistic.ci95 is not None, name
        assert statistic.ci95.low <= statistic.value <= statistic.ci95.high, name
        assert statistic.ci95.low < statistic.ci95.high, name
    assert agreement(items, seed=7) == report
    assert agreement(items, seed=8).cohen_kappa.ci95 != report.cohen_kappa.ci95
    assert report.bootstrap.seed == 7


def test_interval_is_dropped_when_most_resamples_are_undefined() -> None:
    # Spearman needs both the lone I (item 0) and the lone score 0 (item 4) in a resample:
    # P = 1 − 2·(4/5)⁵ + (3/5)⁵ ≈ 0.42 < 1/2, so the interval would describe a biased minority of resamples.
    report = agreement(judgements(["I", "C", "C", "C", "C"], [3, 3, 3, 3, 0]))

    assert report.spearman_rho.value is not None
    assert report.spearman_rho.ci95 is None
    assert report.accuracy.ci95 is not None


def test_no_resamples_means_no_intervals() -> None:
    report = agreement(judgements(["I", "P", "C"], [0, 1, 3]), resamples=0)

    assert report.accuracy.value == 1.0
    assert all(getattr(report, name).ci95 is None for name in STATISTICS)


def test_format_agreement_prints_values_reasons_and_the_matrix() -> None:
    text = format_agreement(agreement(judgements(["I", "I", "P", "P", "C", "C"], [0, 1, 1, 3, 3, 3])))
    lines = text.splitlines()

    assert lines[0] == "6 items compared (excluded: 0 no manual label, 0 not ok)"
    kappa_line = next(line for line in lines if line.startswith("Cohen's kappa "))
    assert "0.500" in kappa_line
    assert "[" in kappa_line
    assert lines[-4].split() == ["manual", "\\", "judge", "I", "P", "C"]
    assert lines[-3].split() == ["I", "1", "1", "0"]
    assert lines[-1].split() == ["C", "0", "0", "2"]

    degenerate = format_agreement(agreement(judgements(["C", "C"], [3, 3])))
    assert "n/a" in degenerate
    assert "(only one class present)" in degenerate
