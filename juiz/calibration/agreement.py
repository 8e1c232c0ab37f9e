"""Raw vs calibrated agreement with the manual labels, side by side; applied calibrations read as an agreement signal
(juiz.agreement.statistics.Signal)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from juiz.agreement.statistics import TITLES, compute_agreement, top_level_signal, verdict_signal
from juiz.calibration.features import labelled_features
from juiz.calibration.figures import figures
from juiz.calibration.fitting import DEFAULT_FOLDS, CalibrationUnavailable, check_fittable, cross_fit_weighting
from schemas.agreement import CalibratedAgreement
from schemas.judgement import Judgement
from schemas.labels import LabelMapping


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
    data = labelled_features(judgements, mapping)
    raw_signal = verdict_signal(mapping) if mapping.verdict is not None else None
    common: dict[str, Any] = {"features": data.names, "n": len(data.labels), "n_missing_features": data.n_missing}
    raw = compute_agreement(data.judgements, mapping, resamples=resamples, seed=seed, signal=raw_signal)
    if not data.names:
        return CalibratedAgreement(
            **common, seed=seed, unavailable="no metric graded ok: nothing to calibrate", raw=raw
        )
    try:
        k = check_fittable(data.labels, len(mapping.classes), folds)
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


def format_calibrated_agreement(report: CalibratedAgreement) -> str:
    """Raw and calibrated side by side (point value and 95% CI), then Brier, ECE and the reliability table."""
    head = f"calibration on {report.n} labelled items, features: {', '.join(report.features) or 'none'}"
    if report.n_missing_features:
        head += f" ({report.n_missing_features} left out: a feature missing)"
    lines = [head]
    if report.calibrated is None or report.raw is None:
        lines.append(f"no calibrated figures: {report.unavailable}; the raw labels stand")
        return "\n".join(lines)
    lines.append(f"calibrated: cross-fitted, {report.folds} folds (seed {report.seed}); every item predicted held-out")
    rows = [["statistic", "raw", "raw 95% CI", "calibrated", "calibrated 95% CI"]]
    for name, title in TITLES.items():
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
    """An agreement signal (juiz.agreement.statistics.Signal) reading each result's applied calibration: the calibrated
    class, Σ p(k)·k to rank by, and the probability-weighted class value on 0–1. None where no calibrated label."""
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
