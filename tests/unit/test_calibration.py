"""Calibration: figures worked out by hand, cross-fitting that never sees an item's own label, degenerate cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from juiz import calibration
from juiz.calibration import (
    Calibration,
    CalibrationUnavailable,
    brier_score,
    cross_fitted_probabilities,
    expected_calibration_error,
    fit_calibration,
    reliability_table,
)


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

    monkeypatch.setattr(calibration, "_model", lambda seed: Spy(max_iter=1000))
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
    reference = LogisticRegression(C=1.0, max_iter=1000, random_state=0).fit(features, labels)
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
    reference = LogisticRegression(C=1.0, max_iter=1000, random_state=0).fit(features, labels)
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
