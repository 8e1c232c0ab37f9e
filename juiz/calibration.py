"""Calibration: learn, from a user's own manual labels, how the judge's signals map to their classes.

The judge's signals for an item (the expected score of each metric graded, or the discrete score where there is no
expected score) form a feature vector; the manual labels are ordinal classes (worst first, as in a `LabelMapping`).
A multinomial logistic regression (scikit-learn) maps features to class probabilities, its class weighting
(balanced or none) chosen by the labels themselves, out of fold. Small judges are
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

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import cohen_kappa_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from juiz.check_rule import template_of
from juiz.errors import JuizError
from schemas.agreement import CalibratedAgreement
from schemas.calibration import (
    CalibratedGrade,
    CalibrationFigures,
    CalibrationRef,
    CalibrationSpec,
    ReliabilityBin,
    calibration_sha256,
)
from schemas.judgement import METRICS, CheckStatus, Judgement, MetricResult, MetricStatus
from schemas.labels import LabelMapping

MIN_ITEMS = 12  # below this, k folds of a few items each say nothing
MIN_PER_CLASS = 2  # a class needs an item in at least two folds to be learnt out of fold
DEFAULT_FOLDS = 5
RELIABILITY_BINS = 10


class CalibrationUnavailable(JuizError, ValueError):
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
    k = _check_fittable(labels, n_classes, folds)
    out = np.zeros((len(labels), n_classes))
    splitter = StratifiedKFold(n_splits=k, shuffle=True, random_state=seed)
    for train, held_out in splitter.split(features, labels):
        model = _model(seed, class_weight).fit(features[train], labels[train])
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
        return calibration_sha256(self.classes, self.features, self.coef, self.intercept, self.fitted_classes)

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

    @classmethod
    def from_spec(cls, spec: CalibrationSpec) -> Calibration:
        """From `options.calibration` (already validated, hash included)."""
        return cls.from_json(spec.model_dump())

    def spec(self) -> CalibrationSpec:
        return CalibrationSpec.model_validate(self.to_json())


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
            "folds": _check_fittable(y, len(classes), folds),
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


# ---------------------------------------------------------------------------------------------------------------------
# Wiring: judgements → features, labelled results → a calibration and its held-out agreement, a calibration → results.

FEATURE_SIGNAL = "expected_score"


def feature_names(judgements: Sequence[Judgement]) -> list[str]:
    """One feature per metric graded `ok` somewhere in these results, in juiz's fixed metric order (METRICS):
    `<metric>.expected_score`; for a metric graded by a check-based prompt, also each check's P(yes):
    `<metric>.check.<name>` (in the prompt's order). The order is recorded in the calibration and never re-derived
    when applying it."""
    graded = {name for j in judgements for name, m in (j.metrics or {}).items() if m.status is MetricStatus.OK}
    if not judgements or any(j.metrics is None for j in judgements):  # results written before `metrics` existed
        graded.add("answer_relevance")
    names = []
    for metric in METRICS:
        if metric not in graded:
            continue
        names.append(f"{metric}.{FEATURE_SIGNAL}")
        checks: dict[str, None] = {}
        for j in judgements:
            result = (j.metrics or {}).get(metric)
            if result is not None and result.status is MetricStatus.OK:
                checks.update(dict.fromkeys(c.name for c in result.checks or []))
        names += [f"{metric}.{CHECK_FEATURE}.{name}" for name in checks]
    return names


CHECK_FEATURE = "check"


def check_feature(result: MetricResult, name: str) -> float | None:
    """A check's value (P(yes), or P(no) where yes means bad) as a feature: the lowest over its results (a check
    asked per sentence has one per sentence, and one unsupported sentence is what matters), but the mean for a check
    asked per point of the judge's own reference (how much of it the answer states, as the rule reads it); None when
    it was never read."""
    read = [c.value for c in result.checks or [] if c.name == name and c.status is CheckStatus.OK]
    values = [p for p in read if p is not None]
    if not values:
        return None
    return statistics.fmean(values) if _asked_per_point(result, name) else min(values)


def _asked_per_point(result: MetricResult, name: str) -> bool:
    template = template_of(result)
    return template is not None and any(c.name == name and c.ask == "per_point" for c in template.checks)


def feature_vector(judgement: Judgement, names: Sequence[str]) -> tuple[list[float] | None, str | None]:
    """The result's features in `names` order, or (None, why) when one is missing: never a made-up value.

    Each feature is the metric's expected score (0–1); where the digit's probabilities were not available (expected
    score null) its discrete score / 3 stands in, the same scale with a coarser grain."""
    from juiz.labels import metric_of

    values: list[float] = []
    for name in names:
        metric = name.split(".", 1)[0]
        result = metric_of(judgement, metric)
        if result is None:
            return None, f"{metric} was not graded"
        if result.status is not MetricStatus.OK:
            return None, f"{metric} has no grade ({result.status.value})"
        if name.startswith(f"{metric}.{CHECK_FEATURE}."):
            value = check_feature(result, name.split(".", 2)[2])
            if value is None:
                return None, f"{metric}'s check {name.split('.', 2)[2]} was not read"
            values.append(value)
        elif result.expected_score is not None:
            values.append(float(result.expected_score))
        elif result.score is not None:
            values.append(result.score / 3.0)
        else:
            return None, f"{metric} has neither an expected nor a discrete score"
    return values, None


@dataclass
class _Labelled:
    judgements: list[Judgement]
    features: np.ndarray
    labels: np.ndarray
    names: list[str]
    n_missing: int


def _labelled(judgements: Sequence[Judgement], mapping: LabelMapping) -> _Labelled:
    """Items with a manual label and every feature; their class indices under the mapping."""
    from juiz.errors import InputError
    from juiz.labels import class_of_label, resolve_numeric_scale

    labelled = [j for j in judgements if j.manual_label is not None]
    names = feature_names(labelled)
    scale = resolve_numeric_scale([j.manual_label for j in labelled], mapping)
    kept, rows, labels = [], [], []
    for j in labelled:
        vector, _ = feature_vector(j, names)
        if vector is None:
            continue
        assert j.manual_label is not None
        try:
            labels.append(class_of_label(j.manual_label, mapping, scale))
        except InputError as error:
            raise InputError(f"item {j.id!r}: {error.message}", field="manual_label") from error
        kept.append(j)
        rows.append(vector)
    return _Labelled(
        judgements=kept,
        features=np.asarray(rows, dtype=float).reshape(len(rows), len(names)),
        labels=np.asarray(labels, dtype=int),
        names=names,
        n_missing=len(labelled) - len(kept),
    )


def fit_from_results(
    judgements: Sequence[Judgement],
    mapping: LabelMapping,
    *,
    folds: int = DEFAULT_FOLDS,
    seed: int = 0,
    class_weights: Sequence[str | None] = CLASS_WEIGHTS,
) -> Calibration:
    """`juiz calibrate`: fit on every labelled result that has all features. CalibrationUnavailable when it can't."""
    data = _labelled(judgements, mapping)
    if not data.names:
        raise CalibrationUnavailable("no metric graded ok in these results: nothing to calibrate from")
    classes = [c.name for c in mapping.classes]
    calibration = fit_calibration(
        data.features, data.labels, classes, data.names, folds=folds, seed=seed, class_weights=class_weights
    )
    calibration.cross_fitted["n_missing_features"] = data.n_missing
    return calibration


def figures(probabilities: np.ndarray, labels: np.ndarray) -> CalibrationFigures:
    return CalibrationFigures(
        brier=round(brier_score(probabilities, labels), 6),
        ece=round(expected_calibration_error(probabilities, labels), 6),
        reliability=[ReliabilityBin.model_validate(row) for row in reliability_table(probabilities, labels)],
    )


def _class_values(mapping: LabelMapping) -> np.ndarray:
    """Each class on 0–1 (the mean of its scores / 3), for the calibrated MAE."""
    return np.asarray([sum(c.scores) / len(c.scores) / 3.0 for c in mapping.classes])


def compute_calibrated_agreement(
    judgements: Sequence[Judgement],
    mapping: LabelMapping,
    *,
    resamples: int = 1000,
    seed: int = 0,
    folds: int = DEFAULT_FOLDS,
) -> CalibratedAgreement:
    """Raw vs calibrated agreement on the same items, the calibrated side cross-fitted (held-out).

    The raw side is the judge's own automated class (the mapping's verdict rule if it has one, else the main
    metric's score). The calibrated class is the most probable one; rank statistics use Σ p(k)·k, and MAE uses the
    probability-weighted class value. Degenerate label sets give `unavailable` with the reason and the raw side only.
    """
    from juiz.agreement import compute_agreement, top_level_signal, verdict_signal

    data = _labelled(judgements, mapping)
    raw_signal = verdict_signal(mapping) if mapping.verdict is not None else None
    common: dict[str, Any] = {"features": data.names, "n": len(data.labels), "n_missing_features": data.n_missing}
    raw = compute_agreement(data.judgements, mapping, resamples=resamples, seed=seed, signal=raw_signal)
    if not data.names:
        return CalibratedAgreement(
            **common, seed=seed, unavailable="no metric graded ok: nothing to calibrate", raw=raw
        )
    try:
        k = _check_fittable(data.labels, len(mapping.classes), folds)
        held_out, _, _ = cross_fit_weighting(data.features, data.labels, len(mapping.classes), folds=folds, seed=seed)
    except CalibrationUnavailable as why:
        return CalibratedAgreement(**common, seed=seed, unavailable=str(why), raw=raw)

    values = _class_values(mapping)
    by_item = {
        id(j): (int(p.argmax()), float(p @ np.arange(len(p))), float(p @ values))
        for j, p in zip(data.judgements, held_out, strict=True)
    }
    calibrated = compute_agreement(
        data.judgements, mapping, resamples=resamples, seed=seed, signal=lambda j: by_item.get(id(j))
    )
    # The raw label taken as certain: probability 1 on its class, for Brier and ECE beside the calibrated ones.
    onehot = np.zeros((len(data.labels), len(mapping.classes)))
    raw_read = raw_signal or top_level_signal(mapping)
    kept = []
    for row, j in enumerate(data.judgements):
        value = raw_read(j)
        if value is not None:
            onehot[row, value[0]] = 1.0
            kept.append(row)
    return CalibratedAgreement(
        **common,
        folds=k,
        seed=seed,
        raw=raw,
        calibrated=calibrated,
        raw_figures=figures(onehot[kept], data.labels[kept]) if kept else None,
        calibrated_figures=figures(held_out, data.labels),
    )


# Parsed calibrations by sha256: a worker applies the same one to every chunk of a batch.
_PARSED: dict[str, Calibration] = {}


def _parsed(spec: CalibrationSpec) -> Calibration:
    calibration = _PARSED.get(spec.sha256)
    if calibration is None or calibration.id != spec.id:
        if len(_PARSED) > 64:
            _PARSED.clear()
        calibration = _PARSED[spec.sha256] = Calibration.from_spec(spec)
    return calibration


def apply_calibration(judgement: Judgement, spec: CalibrationSpec | None) -> None:
    """Set (or, without a calibration, clear) the result's `calibrated` grade and `provenance.calibration`.

    A result missing one of the calibration's features gets `calibrated.error` naming it and no label."""
    if spec is None:
        judgement.calibrated = None
        judgement.provenance = judgement.provenance.model_copy(update={"calibration": None})
        return
    calibration = _parsed(spec)
    judgement.provenance = judgement.provenance.model_copy(
        update={"calibration": CalibrationRef(id=calibration.id, sha256=calibration.sha256)}
    )
    vector, missing = feature_vector(judgement, calibration.features)
    if vector is None:
        judgement.calibrated = CalibratedGrade(error=f"not calibrated: {missing}")
        return
    probabilities = calibration.predict_proba(np.asarray([vector]))[0]
    judgement.calibrated = CalibratedGrade(
        label=calibration.classes[int(probabilities.argmax())],
        probabilities={name: round(float(p), 6) for name, p in zip(calibration.classes, probabilities, strict=True)},
    )


def format_calibrated_agreement(report: CalibratedAgreement) -> str:
    """Raw and calibrated side by side (point value and 95% CI), then Brier, ECE and the reliability table."""
    from juiz.agreement import _TITLES

    head = f"calibration on {report.n} labelled items, features: {', '.join(report.features) or 'none'}"
    if report.n_missing_features:
        head += f" ({report.n_missing_features} left out: a feature missing)"
    lines = [head]
    if report.calibrated is None or report.raw is None:
        lines.append(f"no calibrated figures: {report.unavailable}; the raw labels stand")
        return "\n".join(lines)
    lines.append(f"calibrated: cross-fitted, {report.folds} folds (seed {report.seed}); every item predicted held-out")
    rows = [["statistic", "raw", "raw 95% CI", "calibrated", "calibrated 95% CI"]]
    for name, title in _TITLES.items():
        cells = [title]
        for side in (report.raw, report.calibrated):
            stat = getattr(side, name)
            if stat.value is None:
                cells += ["n/a", f"({stat.reason})"]
            else:
                ci = "n/a" if stat.ci95 is None else f"[{stat.ci95.low:.3f}, {stat.ci95.high:.3f}]"
                cells += [f"{stat.value:.3f}", ci]
        rows.append(cells)
    for label, attribute in (("Brier score", "brier"), ("ECE", "ece")):
        raw_value = getattr(report.raw_figures, attribute) if report.raw_figures else None
        cal_value = getattr(report.calibrated_figures, attribute) if report.calibrated_figures else None
        rows.append(
            [
                label,
                "n/a" if raw_value is None else f"{raw_value:.3f}",
                "",
                "n/a" if cal_value is None else f"{cal_value:.3f}",
                "",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if report.calibrated_figures is not None:
        lines += ["", "reliability (calibrated, held-out): confidence bin, items, mean confidence, accuracy"]
        for b in report.calibrated_figures.reliability:
            lines.append(
                f"  ({b.low:.1f}, {b.high:.1f}]  n={b.n:<4} confidence {b.confidence:.3f}  accuracy {b.accuracy:.3f}"
            )
    lines.append("raw Brier/ECE: the raw label taken as certain (probability 1)")
    return "\n".join(lines)


def calibrated_signal(mapping: LabelMapping) -> Callable[[Judgement], tuple[int, float, float] | None]:
    """An agreement signal (juiz.agreement.Signal) reading each result's applied calibration: the calibrated class,
    Σ p(k)·k to rank by, and the probability-weighted class value on 0–1. None where no calibrated label."""
    values = _class_values(mapping)

    def read(j: Judgement) -> tuple[int, float, float] | None:
        grade = j.calibrated
        if grade is None or grade.probabilities is None or grade.label is None:
            return None
        p = np.asarray([grade.probabilities.get(c.name, 0.0) for c in mapping.classes])
        return int(p.argmax()), float(p @ np.arange(len(p))), float(p @ values)

    return read


def calibrated_probabilities(judgements: Sequence[Judgement], mapping: LabelMapping) -> np.ndarray:
    """The applied calibration's probabilities as a matrix (classes in the mapping's order); rows of 0 where none."""
    return np.asarray(
        [
            [(j.calibrated.probabilities or {}).get(c.name, 0.0) if j.calibrated else 0.0 for c in mapping.classes]
            for j in judgements
        ]
    )
