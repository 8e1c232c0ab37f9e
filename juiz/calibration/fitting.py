"""Fitting a calibration: cross-fitted probabilities, the class weighting the labels choose, one final fit.

Honest figures: the agreement a calibration reports is *cross-fitted*. The items are split into k stratified folds
and each item's calibrated probabilities come from a model fit on the other folds only, so no reported figure has
seen the label it is scored against. The calibration that is saved and applied to new batches is then fit once on
all labelled items; its file records the cross-fitted figures it was judged by.

Degenerate cases (too few labelled items, a single class, a class too small for k folds) are not fitted: the result
says why, and callers keep the raw labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import cohen_kappa_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from juiz.calibration.features import labelled_features
from juiz.calibration.figures import brier_score, expected_calibration_error, reliability_table
from juiz.calibration.model import Calibration
from juiz.runtime.errors import JuizError
from schemas.judgement import Judgement
from schemas.labels import LabelMapping

MIN_ITEMS = 12  # below this, k folds of a few items each say nothing
MIN_PER_CLASS = 2  # a class needs an item in at least two folds to be learnt out of fold
DEFAULT_FOLDS = 5


class CalibrationUnavailable(JuizError, ValueError):
    """Too few labels, one class only, or classes too small to cross-fit: the message says which."""


def check_fittable(labels: np.ndarray, n_classes: int, folds: int) -> int:
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


# Class weights tried, the first winning ties. Balanced: labelled sets are skewed (most answers of a RAG pipeline are
# fine, or most of a test set are failures), and where the signals are weak an unweighted model predicts the majority
# class for nearly everything (dev split, checks-2 judge: cross-fitted quadratic κ 0.18 balanced → 0.43; ordinal
# Frank-Hall 0.20; bench.check_report). Where they are strong, balancing pushes items of the big class into the small
# ones (dev split, checks-7 judge, 5 folds by topic: 0.68 balanced, 0.77 unweighted). So the labels decide, out of
# fold: `fit_calibration` keeps the weighting whose cross-fitted quadratic κ is higher.
CLASS_WEIGHTS: tuple[str | None, ...] = ("balanced", None)


def _model(seed: int, class_weight: str | None = "balanced") -> Pipeline:
    # Standardised features, then mild L2 regularisation (C=1): expected scores of different classes often sit a
    # few tenths apart on 0–1, and C=1 on the raw scale would shrink those slopes until P was never predicted;
    # on the standardised scale it only keeps a few hundred labels from overfitting and probabilities from 0 and 1.
    return make_pipeline(
        StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=seed, class_weight=class_weight)
    )


def _raw_scale_coefficients(model: Pipeline) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline as one linear model on the unscaled features, so a calibration file needs no scaler:
    w·(x − μ)/σ + b = (w/σ)·x + (b − Σ w·μ/σ)."""
    scaler: StandardScaler = model[0]
    regression: LogisticRegression = model[-1]
    coef = regression.coef_ / scaler.scale_
    intercept = regression.intercept_ - (regression.coef_ * scaler.mean_ / scaler.scale_).sum(axis=1)
    return coef, intercept


def _proba_all_classes(model: Any, features: np.ndarray, n_classes: int) -> np.ndarray:
    """predict_proba with a column for every class, also those absent from the model's training folds (p = 0)."""
    raw = model.predict_proba(features)
    full = np.zeros((len(features), n_classes))
    full[:, model.classes_.astype(int)] = raw
    return full


def cross_fitted_probabilities(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    class_weight: str | None = "balanced",
) -> np.ndarray:
    """Each item's class probabilities from a model fit on the other folds only (never on its own label)."""
    k = check_fittable(labels, n_classes, folds)
    out = np.zeros((len(labels), n_classes))
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for train, held_out in splitter.split(features, labels):
        model = _model(seed, class_weight).fit(features[train], labels[train])
        out[held_out] = _proba_all_classes(model, features[held_out], n_classes)
    return out


def cross_fit_weighting(
    features: np.ndarray,
    labels: np.ndarray,
    n_classes: int,
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    class_weights: Sequence[str | None] = CLASS_WEIGHTS,
) -> tuple[np.ndarray, str | None, dict[str | None, float]]:
    """The cross-fitted probabilities of the class weighting whose held-out quadratic κ is highest; that weighting;
    every weighting's κ."""
    tried = {
        weight: cross_fitted_probabilities(features, labels, n_classes, folds=folds, seed=seed, class_weight=weight)
        for weight in class_weights
    }
    kappas = {weight: _quadratic_kappa(labels, held_out.argmax(axis=1)) for weight, held_out in tried.items()}
    chosen = max(class_weights, key=lambda weight: kappas[weight])  # max keeps the first of equals
    return tried[chosen], chosen, kappas


def fit_calibration(
    features: np.ndarray,
    labels: Sequence[int] | np.ndarray,
    classes: Sequence[str],
    feature_names: Sequence[str],
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    class_weights: Sequence[str | None] = CLASS_WEIGHTS,
) -> Calibration:
    """Cross-fit for honest figures, then fit once on everything. CalibrationUnavailable when it can't."""
    x = np.asarray(features, dtype=float)
    y = np.asarray(labels, dtype=int)
    held_out, class_weight, kappas = cross_fit_weighting(
        x, y, len(classes), folds=folds, seed=seed, class_weights=class_weights
    )
    model = _model(seed, class_weight).fit(x, y)
    coef, intercept = _raw_scale_coefficients(model)
    return Calibration(
        classes=list(classes),
        features=list(feature_names),
        coef=coef.tolist(),
        intercept=intercept.tolist(),
        fitted_classes=[int(c) for c in model.classes_],
        cross_fitted={
            "n": len(y),
            "folds": check_fittable(y, len(classes), folds),
            "seed": seed,
            "brier": round(brier_score(held_out, y), 6),
            "ece": round(expected_calibration_error(held_out, y), 6),
            "reliability": reliability_table(held_out, y),
            "predicted": held_out.argmax(axis=1).tolist(),
            "class_weight": class_weight or "none",
            "kappa_quadratic_by_class_weight": {weight or "none": round(k, 6) for weight, k in kappas.items()},
        },
    )


def _quadratic_kappa(labels: np.ndarray, predicted: np.ndarray) -> float:
    """Quadratic-weighted Cohen's κ; −1 where it is undefined (one class everywhere on both sides)."""
    kappa = cohen_kappa_score(labels, predicted, weights="quadratic")
    return float(kappa) if np.isfinite(kappa) else -1.0


def fit_from_results(
    judgements: Sequence[Judgement],
    mapping: LabelMapping,
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    class_weights: Sequence[str | None] = CLASS_WEIGHTS,
) -> Calibration:
    """`juiz calibrate`: fit on every labelled result that has all features. CalibrationUnavailable when it can't."""
    data = labelled_features(judgements, mapping)
    if not data.names:
        raise CalibrationUnavailable("no metric graded ok in these results: nothing to calibrate from")
    classes = [c.name for c in mapping.classes]
    calibration = fit_calibration(
        data.features, data.labels, classes, data.names, folds=folds, seed=seed, class_weights=class_weights
    )
    calibration.cross_fitted["n_missing_features"] = data.n_missing
    return calibration
