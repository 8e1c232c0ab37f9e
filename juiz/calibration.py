"""Calibration: learn, from a user's own manual labels, how the judge's signals map to their classes.

The judge's signals for an item (the expected score of each metric graded, or the discrete score where there is no
expected score) form a feature vector; the manual labels are ordinal classes (worst first, as in a `LabelMapping`).
A multinomial logistic regression (scikit-learn) maps features to class probabilities. Small judges are
overconfident in their discrete score, while the probability they put on each digit ranks items well: this is how
juiz turns that ranking into labels that match the people who label the same items.

Honest figures: the agreement a calibration reports is *cross-fitted*. The items are split into k stratified folds
and each item's calibrated probabilities come from a model fit on the other folds only, so no reported figure has
seen the label it is scored against. The calibration that is saved and applied to new batches is then fit once on
all labelled items; its file records the cross-fitted figures it was judged by.

Degenerate cases (too few labelled items, a single class, a class too small for k folds) are not fitted: the result
says why, and callers keep the raw labels.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold

MIN_ITEMS = 12  # below this, k folds of a few items each say nothing
MIN_PER_CLASS = 2  # a class needs an item in at least two folds to be learnt out of fold
DEFAULT_FOLDS = 5
RELIABILITY_BINS = 10


class CalibrationUnavailable(ValueError):
    """Too few labels, one class only, or classes too small to cross-fit: the message says which."""


def brier_score(probabilities: np.ndarray, labels: np.ndarray) -> float:
    """Multi-class Brier score: mean over items of Σ_k (p_k − [y = k])². 0 is perfect; 2 is the worst."""
    onehot = np.eye(probabilities.shape[1])[labels]
    return float(np.mean(np.sum((probabilities - onehot) ** 2, axis=1)))


def reliability_table(
    probabilities: np.ndarray, labels: np.ndarray, bins: int = RELIABILITY_BINS
) -> list[dict[str, float | int]]:
    """Top-class confidence in equal-width bins: per non-empty bin, its range, size, mean confidence, accuracy."""
    confidence = probabilities.max(axis=1)
    correct = (probabilities.argmax(axis=1) == labels).astype(float)
    edges = np.linspace(0.0, 1.0, bins + 1)
    # Bin i holds (edges[i], edges[i+1]]; the first bin also holds exactly 0.
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    rows: list[dict[str, float | int]] = []
    for i in range(bins):
        members = which == i
        if not members.any():
            continue
        rows.append(
            {
                "low": round(float(edges[i]), 4),
                "high": round(float(edges[i + 1]), 4),
                "n": int(members.sum()),
                "confidence": round(float(confidence[members].mean()), 6),
                "accuracy": round(float(correct[members].mean()), 6),
            }
        )
    return rows


def expected_calibration_error(probabilities: np.ndarray, labels: np.ndarray, bins: int = RELIABILITY_BINS) -> float:
    """ECE: Σ over bins of (bin size / n) · |accuracy − mean confidence|, on the top class."""
    rows = reliability_table(probabilities, labels, bins)
    n = len(labels)
    return float(sum(int(r["n"]) / n * abs(float(r["accuracy"]) - float(r["confidence"])) for r in rows))


def _check_fittable(labels: np.ndarray, n_classes: int, folds: int) -> int:
    """The number of folds to use; CalibrationUnavailable when the labels can't support cross-fitting."""
    if len(labels) < MIN_ITEMS:
        raise CalibrationUnavailable(f"{len(labels)} labelled item(s); calibration needs at least {MIN_ITEMS}")
    counts = np.bincount(labels, minlength=n_classes)
    present = counts[counts > 0]
    if len(present) < 2:
        raise CalibrationUnavailable("only one class among the manual labels")
    if present.min() < MIN_PER_CLASS:
        raise CalibrationUnavailable(f"a class has fewer than {MIN_PER_CLASS} labelled items")
    return int(min(folds, present.min()))


def _model(seed: int) -> LogisticRegression:
    # Mild regularisation: a few hundred labels and a handful of features; the default C=1 overfits tiny sets less
    # than an unregularised fit and keeps probabilities away from 0 and 1.
    return LogisticRegression(C=1.0, max_iter=1000, random_state=seed)


def _proba_all_classes(model: LogisticRegression, features: np.ndarray, n_classes: int) -> np.ndarray:
    """predict_proba with a column for every class, also those absent from the model's training folds (p = 0)."""
    raw = model.predict_proba(features)
    full = np.zeros((len(features), n_classes))
    full[:, model.classes_.astype(int)] = raw
    return full


def cross_fitted_probabilities(
    features: np.ndarray, labels: np.ndarray, n_classes: int, *, folds: int = DEFAULT_FOLDS, seed: int = 0
) -> np.ndarray:
    """Each item's class probabilities from a model fit on the other folds only (never on its own label)."""
    k = _check_fittable(labels, n_classes, folds)
    out = np.zeros((len(labels), n_classes))
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for train, held_out in splitter.split(features, labels):
        model = _model(seed).fit(features[train], labels[train])
        out[held_out] = _proba_all_classes(model, features[held_out], n_classes)
    return out


@dataclass
class Calibration:
    """A fitted calibration: features → class probabilities; serialisable, identified by id and content hash."""

    classes: list[str]
    features: list[str]
    coef: list[list[float]]
    intercept: list[float]
    fitted_classes: list[int]  # class indices the final model saw (all, unless a class had no labels)
    cross_fitted: dict[str, Any] = field(default_factory=dict)  # held-out figures the calibration was judged by
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created_at: float = field(default_factory=time.time)

    @property
    def sha256(self) -> str:
        """Hash of what decides a prediction (classes, features, coefficients): two files that predict alike match."""
        payload = json.dumps([self.classes, self.features, self.coef, self.intercept, self.fitted_classes])
        return hashlib.sha256(payload.encode()).hexdigest()

    def predict_proba(self, features: np.ndarray) -> np.ndarray:
        logits = np.asarray(features, dtype=float) @ np.asarray(self.coef).T + np.asarray(self.intercept)
        if logits.shape[1] == 1:  # scikit-learn's binary case: one logit for the second class
            logits = np.hstack([np.zeros_like(logits), logits])
        logits -= logits.max(axis=1, keepdims=True)
        fitted = np.exp(logits)
        fitted /= fitted.sum(axis=1, keepdims=True)
        out = np.zeros((len(fitted), len(self.classes)))
        out[:, self.fitted_classes] = fitted
        return out

    def predict(self, features: np.ndarray) -> list[str]:
        return [self.classes[i] for i in self.predict_proba(features).argmax(axis=1)]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "sha256": self.sha256,
            "created_at": self.created_at,
            "classes": self.classes,
            "features": self.features,
            "model": {
                "kind": "multinomial logistic regression (scikit-learn)",
                "coef": self.coef,
                "intercept": self.intercept,
                "fitted_classes": self.fitted_classes,
            },
            "cross_fitted": self.cross_fitted,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Calibration:
        model = data["model"]
        calibration = cls(
            classes=list(data["classes"]),
            features=list(data["features"]),
            coef=model["coef"],
            intercept=model["intercept"],
            fitted_classes=model["fitted_classes"],
            cross_fitted=data.get("cross_fitted", {}),
            id=data["id"],
            created_at=data["created_at"],
        )
        if data.get("sha256") and data["sha256"] != calibration.sha256:
            raise ValueError("calibration file was altered: its sha256 does not match its content")
        return calibration


def fit_calibration(
    features: np.ndarray,
    labels: Sequence[int],
    classes: Sequence[str],
    feature_names: Sequence[str],
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
) -> Calibration:
    """Cross-fit for honest figures, then fit once on everything. CalibrationUnavailable when it can't."""
    x = np.asarray(features, dtype=float)
    y = np.asarray(labels, dtype=int)
    held_out = cross_fitted_probabilities(x, y, len(classes), folds=folds, seed=seed)
    model = _model(seed).fit(x, y)
    return Calibration(
        classes=list(classes),
        features=list(feature_names),
        coef=model.coef_.tolist(),
        intercept=model.intercept_.tolist(),
        fitted_classes=[int(c) for c in model.classes_],
        cross_fitted={
            "n": len(y),
            "folds": _check_fittable(y, len(classes), folds),
            "seed": seed,
            "brier": round(brier_score(held_out, y), 6),
            "ece": round(expected_calibration_error(held_out, y), 6),
            "reliability": reliability_table(held_out, y),
            "predicted": held_out.argmax(axis=1).tolist(),
        },
    )
