"""Calibration: figures worked out by hand, cross-fitting that never sees an item's own label, degenerate cases."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

import prompts
from juiz.calibration import fitting
from juiz.calibration.agreement import compute_calibrated_agreement, format_calibrated_agreement
from juiz.calibration.features import feature_names, feature_vector
from juiz.calibration.figures import brier_score, expected_calibration_error, reliability_table
from juiz.calibration.fitting import (
    CalibrationUnavailable,
    cross_fitted_probabilities,
    fit_calibration,
    fit_from_results,
)
from juiz.calibration.model import Calibration
from schemas import BatchOptions, Judgement, LabelMapping, Provenance, Triple
from schemas.judgement import JudgementStatus, MetricStatus


def test_brier_score_by_hand() -> None:
    # item 1: perfect (0); item 2: (0.5)² + (0.5)² = 0.5; mean 0.25
    assert brier_score(np.array([[1.0, 0.0], [0.5, 0.5]]), np.array([0, 1])) == pytest.approx(0.25)


def test_ece_and_reliability_by_hand() -> None:
    probabilities = np.array([[0.9, 0.1], [0.9, 0.1], [0.6, 0.4], [0.6, 0.4]])
    labels = np.array([0, 1, 0, 0])
    rows = reliability_table(probabilities, labels)
    # confidence 0.9 → bin (0.8, 0.9], half right; 0.6 → bin (0.5, 0.6], all right
    assert [(r["low"], r["high"], r["n"], r["confidence"], r["accuracy"]) for r in rows] == [
        (0.5, 0.6, 2, 0.6, 1.0),
        (0.8, 0.9, 2, 0.9, 0.5),
    ]
    # ECE = 2/4·|0.5 − 0.9| + 2/4·|1.0 − 0.6| = 0.4
    assert expected_calibration_error(probabilities, labels) == pytest.approx(0.4)


def _separable(n_per_class: int = 10, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat([0, 1, 2], n_per_class)
    signal = labels / 2 + rng.normal(0, 0.15, len(labels))
    return np.column_stack([signal]), labels


def test_cross_fitting_never_fits_on_the_rows_it_predicts(monkeypatch: pytest.MonkeyPatch) -> None:
    features, labels = _separable()
    # A second column makes every row unique, so a row seen in training can be recognised at prediction time.
    features = np.column_stack([features, np.arange(len(labels)) * 1e-6])
    fitted_rows: list[set[tuple[float, ...]]] = []
    predicted_rows: list[set[tuple[float, ...]]] = []

    class Spy(LogisticRegression):
        def fit(self, x, y, sample_weight=None):  # type: ignore[no-untyped-def]
            fitted_rows.append({tuple(r) for r in x})
            return super().fit(x, y, sample_weight)

        def predict_proba(self, x):  # type: ignore[no-untyped-def]
            predicted_rows.append({tuple(r) for r in x})
            return super().predict_proba(x)

    monkeypatch.setattr(fitting, "_model", lambda seed, class_weight=None: Spy(max_iter=1000))
    probabilities = cross_fitted_probabilities(features, labels, 3, folds=5)
    assert len(fitted_rows) == len(predicted_rows) == 5
    for trained, predicted in zip(fitted_rows, predicted_rows, strict=True):
        assert not trained & predicted
    assert set().union(*predicted_rows) == {tuple(r) for r in features}  # every item predicted once, out of fold
    assert probabilities.shape == (30, 3)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)


def test_an_items_own_label_does_not_move_its_held_out_prediction() -> None:
    features, labels = _separable(n_per_class=12)
    before = cross_fitted_probabilities(features, labels, 3, folds=3, seed=0)
    # Swap the labels of two items of different classes in the same fold position: class counts stay, folds stay
    # stratified; the items' own held-out rows may only change through the other folds' models, never directly.
    flipped = labels.copy()
    flipped[0] = 2  # an item truly of class 0 now labelled 2
    after = cross_fitted_probabilities(features, flipped, 3, folds=3, seed=0)
    # The mislabelled item is still predicted as class 0: its own (wrong) label never reached its own model.
    assert before[0].argmax() == 0
    assert after[0].argmax() == 0


def test_calibration_reproduces_scikit_learn_and_survives_json() -> None:
    features, labels = _separable()
    fitted = fit_calibration(features, labels, ["I", "P", "C"], ["expected_score"])
    reference = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=0))
    reference.fit(features, labels)
    np.testing.assert_allclose(fitted.predict_proba(features), reference.predict_proba(features), atol=1e-9)
    again = Calibration.from_json(fitted.to_json())
    assert again.sha256 == fitted.sha256 and again.id == fitted.id
    assert again.predict(np.array([[0.0], [1.0]])) == ["I", "C"]
    assert fitted.cross_fitted["n"] == 30 and 0 <= fitted.cross_fitted["ece"] <= 1
    tampered = fitted.to_json()
    tampered["model"]["intercept"] = [0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="altered"):
        Calibration.from_json(tampered)


def test_binary_labels_give_two_column_probabilities() -> None:
    rng = np.random.default_rng(3)
    labels = np.repeat([0, 1], 10)
    features = np.column_stack([labels + rng.normal(0, 0.2, 20)])
    fitted = fit_calibration(features, labels, ["N", "Y"], ["expected_score"])
    reference = make_pipeline(StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=0))
    reference.fit(features, labels)
    np.testing.assert_allclose(fitted.predict_proba(features), reference.predict_proba(features), atol=1e-9)


def test_a_class_without_labels_gets_probability_zero() -> None:
    features, labels = _separable()
    labels = np.where(labels == 1, 2, labels)  # nobody labelled P
    fitted = fit_calibration(features, labels, ["I", "P", "C"], ["expected_score"])
    assert fitted.fitted_classes == [0, 2]
    assert np.all(fitted.predict_proba(features)[:, 1] == 0)


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ([0, 1] * 3, "at least 12"),
        ([2] * 20, "only one class"),
        ([0] * 19 + [1], "fewer than 2"),
    ],
)
def test_degenerate_labels_say_why(labels: list[int], reason: str) -> None:
    features = np.linspace(0, 1, len(labels)).reshape(-1, 1)
    with pytest.raises(CalibrationUnavailable, match=reason):
        fit_calibration(features, labels, ["I", "P", "C"], ["expected_score"])


# --- wiring: results → features → a calibration → results ----------------------------------------------------------


def _judgement(i: int, label: str | None, expected: float | None, score: int | None = 3, **extra: object) -> Judgement:
    from schemas.judgement import MetricResult

    provenance = Provenance(
        model="fake", prompt="answer_relevance@juiz-1.en", prompt_sha256="", sampling={}, juiz_version="0"
    )
    metrics: dict[str, Any] = {
        "answer_relevance": MetricResult(
            status=MetricStatus.OK, score=score, expected_score=expected, provenance=provenance
        ),
        **extra,  # type: ignore[dict-item]
    }
    return Judgement(
        id=f"i{i}",
        status=JudgementStatus.OK,
        score=score,
        expected_score=expected,
        question="q",
        answer="a",
        manual_label=label,
        provenance=provenance,
        metrics=metrics,
    )


def _labelled_results(n_per_class: int = 8) -> list[Judgement]:
    """An overconfident judge: score 3 everywhere, while its expected score ranks I < P < C."""
    rng = np.random.default_rng(0)
    out: list[Judgement] = []
    for label, centre in (("I", 0.3), ("P", 0.55), ("C", 0.85)):
        for _ in range(n_per_class):
            out.append(_judgement(len(out), label, float(np.clip(centre + rng.normal(0, 0.05), 0, 1))))
    return out


def test_features_are_expected_scores_in_a_fixed_order_with_the_discrete_score_as_fallback() -> None:
    from schemas.judgement import MetricResult

    grounded = MetricResult(status=MetricStatus.OK, score=1, expected_score=None)
    j = _judgement(0, "C", 0.9, groundedness=grounded)
    names = feature_names([j])
    assert names == ["answer_relevance.expected_score", "groundedness.expected_score"]
    assert feature_vector(j, names) == ([0.9, pytest.approx(1 / 3)], None)
    skipped = _judgement(1, "C", 0.9, groundedness=MetricResult(status=MetricStatus.SKIPPED, error="no context"))
    assert feature_vector(skipped, names) == (None, "groundedness has no grade (skipped)")


def test_calibrated_agreement_is_held_out_and_beats_an_overconfident_raw_judge() -> None:
    results = _labelled_results()
    report = compute_calibrated_agreement(results, LabelMapping(), resamples=50)
    assert report.unavailable is None and report.n == 24 and report.folds == 5
    assert report.raw is not None and report.calibrated is not None
    assert report.raw.accuracy.value == pytest.approx(8 / 24)  # everything called C
    assert report.calibrated.accuracy.value is not None and report.calibrated.accuracy.value > 0.8
    assert report.calibrated_figures is not None and report.raw_figures is not None
    # raw labels taken as certain: Brier = 2 × error rate; ECE = |accuracy − 1|
    assert report.raw_figures.brier == pytest.approx(2 * 16 / 24, abs=1e-6)
    assert report.raw_figures.ece == pytest.approx(16 / 24, abs=1e-6)
    assert sum(b.n for b in report.calibrated_figures.reliability) == 24
    text = format_calibrated_agreement(report)
    assert "raw" in text and "calibrated" in text and "Brier" in text


def test_degenerate_labels_fall_back_to_raw_and_say_why() -> None:
    results = _labelled_results(n_per_class=3)  # 9 labelled items
    report = compute_calibrated_agreement(results, LabelMapping(), resamples=10)
    assert report.calibrated is None and report.raw is not None
    assert report.unavailable is not None and "at least 12" in report.unavailable
    with pytest.raises(CalibrationUnavailable):
        fit_from_results(results, LabelMapping())


def test_a_calibration_applied_to_new_results_records_itself_and_names_missing_features() -> None:
    from juiz.calibration.grades import apply_calibration

    fitted = fit_from_results(_labelled_results(), LabelMapping())
    spec = fitted.spec()
    assert spec.sha256 == fitted.sha256 and spec.metrics() == ["answer_relevance"]
    fresh = _judgement(100, None, 0.3)
    apply_calibration(fresh, spec)
    assert fresh.calibrated is not None and fresh.calibrated.label == "I"
    assert fresh.calibrated.probabilities is not None and sum(fresh.calibrated.probabilities.values()) == pytest.approx(
        1
    )
    assert fresh.provenance.calibration is not None and fresh.provenance.calibration.id == fitted.id
    failed = _judgement(101, None, None, score=None)
    assert failed.metrics is not None
    failed.metrics["answer_relevance"].status = MetricStatus.FAILED
    apply_calibration(failed, spec)
    assert failed.calibrated is not None and failed.calibrated.label is None
    assert failed.calibrated.error == "not calibrated: answer_relevance has no grade (failed)"
    apply_calibration(fresh, None)  # a cached result served to a batch without a calibration
    assert fresh.calibrated is None and fresh.provenance.calibration is None


def test_options_take_a_calibration_and_refuse_an_altered_or_unreadable_one() -> None:
    spec = fit_from_results(_labelled_results(), LabelMapping()).to_json()
    options = BatchOptions.model_validate({"calibration": spec})
    assert options.calibration is not None and options.calibration.id == spec["id"]
    altered = {**spec, "model": {**spec["model"], "intercept": [0.0, 0.0, 0.0]}}
    with pytest.raises(ValidationError, match="altered"):
        BatchOptions.model_validate({"calibration": altered})
    with pytest.raises(ValidationError, match="add it to metrics"):
        BatchOptions.model_validate(
            {"calibration": {**spec, **_renamed(spec, "groundedness.expected_score")}, "metrics": ["answer_relevance"]}
        )


def _renamed(spec: dict, feature: str) -> dict:  # type: ignore[type-arg]
    from schemas.calibration import calibration_sha256

    model = spec["model"]
    sha = calibration_sha256(spec["classes"], [feature], model["coef"], model["intercept"], model["fitted_classes"])
    return {"features": [feature], "sha256": sha}


def test_judge_applies_the_batchs_calibration_to_every_result() -> None:
    from juiz.engines.fake import FakeEngine
    from juiz.judging.judge import Judge

    fitted = fit_from_results(_labelled_results(), LabelMapping())

    def score_0(conversation: list[dict[str, str]]) -> str:
        """Grades 0 with either kind of prompt: "No" to a check-based prompt's (the default's) yes/no questions."""
        return (
            "No"
            if prompts.asks_yes_no(conversation[-1]["content"])
            else "Criteria: c\nSupporting Evidence: e\nScore: 0"
        )

    engine = FakeEngine(score_0)
    items = [Triple(id="a", question="q?", answer="no idea")]
    (judgement,) = Judge(engine).grade(items, BatchOptions(calibration=fitted.spec()))
    assert judgement.calibrated is not None and judgement.calibrated.label == "I"
    assert judgement.provenance.calibration is not None
    assert judgement.provenance.calibration.sha256 == fitted.sha256
    assert judgement.uncertainty is not None and judgement.uncertainty.calibrated_doubt is not None


def test_the_class_weighting_with_the_higher_held_out_kappa_is_the_one_fitted() -> None:
    """Skewed labels (24 of one class, 6 and 6 of the others) whose signal is strong: the labels decide whether
    balancing the classes helps, out of fold, and the saved model is the one fit with the winner."""
    rng = np.random.default_rng(3)
    labels = np.array([0] * 24 + [1] * 6 + [2] * 6)
    features = (labels / 2 + rng.normal(0, 0.18, len(labels))).reshape(-1, 1)
    fitted = fit_calibration(features, labels, ["I", "P", "C"], ["expected_score"])
    kappas = fitted.cross_fitted["kappa_quadratic_by_class_weight"]
    assert set(kappas) == {"balanced", "none"}
    chosen = fitted.cross_fitted["class_weight"]
    assert kappas[chosen] == max(kappas.values())
    weight = None if chosen == "none" else "balanced"
    reference = make_pipeline(
        StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=0, class_weight=weight)
    ).fit(features, labels)
    np.testing.assert_allclose(fitted.predict_proba(features), reference.predict_proba(features), atol=1e-6)
