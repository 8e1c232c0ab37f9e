"""Agreement between the judge and manual labels, with bootstrap confidence intervals.

The judge grades 0–3 and people label C / P / I (or numbers); both are mapped to the ordinal classes of a
`LabelMapping` and compared with the usual inter-rater statistics. Figures that are undefined for the data at hand
(too few items, a single class) come back as null with a reason instead of NaN, so the report always serialises and
a reader knows why a number is missing.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import krippendorff
import numpy as np
from scipy.stats import ConstantInputWarning, kendalltau, spearmanr
from sklearn.metrics import accuracy_score, cohen_kappa_score, confusion_matrix, mean_absolute_error

from juiz.agreement.labels import (
    class_index,
    class_of_label,
    class_of_score,
    class_of_value,
    label_rule,
    label_unit_value,
    metric_of,
    metric_value,
    resolve_numeric_scale,
    verdict_score,
    with_default_verdict,
)
from juiz.runtime.errors import InputError
from schemas.agreement import AgreementByMetric, AgreementReport, Bootstrap, Interval, Statistic
from schemas.judgement import METRICS, Judgement, JudgementStatus
from schemas.labels import LabelMapping

_MIN_DEFINED_SHARE = 0.5  # below this share of defined resamples, an interval would describe a biased subset


class Undefined(Exception):
    """The statistic has no value for this sample; the message is the reason shown to the user."""


@dataclass(frozen=True)
class Pairs:
    """Aligned per-item arrays for the compared items; `take` builds a bootstrap resample."""

    manual: np.ndarray  # class index of the manual label
    judge: np.ndarray  # class index of the judge's score
    score: np.ndarray  # what ranks the judge's view: its 0–3 score (or 3 × expected score, or the verdict's class)
    manual_unit: np.ndarray  # manual label on 0–1
    judge_unit: np.ndarray  # judge's normalised score on 0–1
    n_classes: int

    def __len__(self) -> int:
        return len(self.manual)

    def take(self, index: np.ndarray) -> Pairs:
        return Pairs(
            self.manual[index],
            self.judge[index],
            self.score[index],
            self.manual_unit[index],
            self.judge_unit[index],
            self.n_classes,
        )


def _need(pairs: Pairs, minimum: int) -> None:
    if len(pairs) == 0:
        raise Undefined("no items to compare")
    if len(pairs) < minimum:
        raise Undefined(f"n < {minimum}")


def _single_class(*arrays: np.ndarray) -> bool:
    return len(np.unique(np.concatenate(arrays))) < 2


def _accuracy(pairs: Pairs) -> float:
    _need(pairs, 1)
    return float(accuracy_score(pairs.manual, pairs.judge))


def _kappa(pairs: Pairs, weights: str | None) -> float:
    _need(pairs, 2)
    # Expected agreement is 1 exactly when both sides use one and the same class: kappa is 0/0 there.
    if _single_class(pairs.manual, pairs.judge):
        raise Undefined("only one class present")
    return float(cohen_kappa_score(pairs.manual, pairs.judge, labels=list(range(pairs.n_classes)), weights=weights))


def _alpha_ordinal(pairs: Pairs) -> float:
    _need(pairs, 2)
    # Alpha compares observed with expected disagreement over the pooled values: none expected if one value only.
    if _single_class(pairs.manual, pairs.judge):
        raise Undefined("only one class present")
    return float(
        krippendorff.alpha(
            reliability_data=np.vstack([pairs.manual, pairs.judge]).astype(float),
            level_of_measurement="ordinal",
            value_domain=list(range(pairs.n_classes)),
        )
    )


def _rank_correlation(pairs: Pairs, test: Callable[[np.ndarray, np.ndarray], Any]) -> float:
    _need(pairs, 2)
    if _single_class(pairs.manual):
        raise Undefined("constant input: manual labels are all one class")
    if _single_class(pairs.score):
        raise Undefined("constant input: judge scores are all the same")
    with warnings.catch_warnings():
        # Ruled out above; the filter only keeps scipy's own check from becoming an error under `-W error`.
        warnings.simplefilter("ignore", ConstantInputWarning)
        result = test(pairs.manual, pairs.score)
    return float(result.statistic)


def _mae(pairs: Pairs) -> float:
    _need(pairs, 1)
    return float(mean_absolute_error(pairs.manual_unit, pairs.judge_unit))


# Report field → how it is computed. The order is the order of the printed table.
STATISTICS: dict[str, Callable[[Pairs], float]] = {
    "accuracy": _accuracy,
    "cohen_kappa": lambda p: _kappa(p, None),
    "cohen_kappa_quadratic": lambda p: _kappa(p, "quadratic"),
    "krippendorff_alpha_ordinal": _alpha_ordinal,
    "spearman_rho": lambda p: _rank_correlation(p, spearmanr),
    "kendall_tau": lambda p: _rank_correlation(p, kendalltau),
    "mae": _mae,
}

TITLES = {
    "accuracy": "accuracy",
    "cohen_kappa": "Cohen's kappa",
    "cohen_kappa_quadratic": "Cohen's kappa (quadratic)",
    "krippendorff_alpha_ordinal": "Krippendorff's alpha (ordinal)",
    "spearman_rho": "Spearman rho",
    "kendall_tau": "Kendall tau",
    "mae": "MAE (0-1)",
}


def evaluate_statistic(statistic: Callable[[Pairs], float], pairs: Pairs) -> float:
    """The statistic, with any non-finite result turned into `Undefined` so NaN never reaches the report."""
    value = statistic(pairs)
    if not math.isfinite(value):
        raise Undefined("undefined for these items")
    return value


# What one judge signal gives for one result: (class index, value to rank by, value on 0–1), or None when the result
# has no such grade (not requested, skipped, failed, unparsed).
Signal = Callable[[Judgement], tuple[int, float, float] | None]


def _top_level(mapping: LabelMapping) -> Signal:
    """The result's own score: the verdict's when the mapping's rule labels it (`label_rule`: results written before
    the verdict was the label read the same), else its main metric's discrete score."""

    def read(j: Judgement) -> tuple[int, float, float] | None:
        rule = label_rule(j, mapping)
        if rule is not None:
            score = verdict_score(j, rule)
            return None if score is None else (class_of_score(score, mapping), float(score), score / 3.0)
        if j.status != JudgementStatus.OK or j.score is None:
            return None  # an ok judgement without a score breaks the contract, but it can't be compared either
        unit = j.normalized_score if j.normalized_score is not None else j.score / 3.0
        return class_of_score(int(j.score), mapping), float(j.score), unit

    return read


def top_level_signal(mapping: LabelMapping) -> Signal:
    """The signal `compute_agreement` uses by default (juiz.calibration compares its calibrated side with it)."""
    return _top_level(mapping)


def metric_signal(metric: str, mapping: LabelMapping, signal: str = "score") -> Signal:
    """One metric's grade: its discrete score through the mapping's classes, or its expected score cut by the
    mapping's thresholds (ranked by the expected score itself, which keeps its finer grain)."""

    def read(j: Judgement) -> tuple[int, float, float] | None:
        value = metric_value(metric_of(j, metric), signal)
        if value is None:
            return None
        if signal == "expected_score":
            return class_of_value(value, mapping), value, value / 3.0
        return class_of_score(int(value), mapping), value, value / 3.0

    return read


def verdict_signal(mapping: LabelMapping) -> Signal:
    """The automated label the mapping's rule gives (its class index is also what is ranked)."""

    def read(j: Judgement) -> tuple[int, float, float] | None:
        index = class_index(j, mapping)
        if index is None:
            return None
        scores = mapping.classes[index].scores
        return index, float(index), sum(scores) / len(scores) / 3.0

    return read


def select_pairs(
    judgements: Sequence[Judgement], mapping: LabelMapping, signal: Signal | None = None
) -> tuple[Pairs, dict[str, int]]:
    """The comparable items as arrays, and how many were left out and why."""
    read = signal or _top_level(mapping)
    excluded = {"no_manual_label": 0, "not_ok": 0}
    labelled = [j for j in judgements if j.manual_label is not None]
    excluded["no_manual_label"] = len(judgements) - len(labelled)
    # The scale is read from every label, so whether the judge failed on some items can't change how others read.
    scale = resolve_numeric_scale([j.manual_label for j in labelled], mapping)
    kept = [(j, value) for j in labelled if (value := read(j)) is not None]
    excluded["not_ok"] = len(labelled) - len(kept)

    manual, manual_unit = [], []
    for j, _ in kept:
        label = j.manual_label
        assert label is not None  # filtered above; narrows the type
        try:
            manual.append(class_of_label(label, mapping, scale))
            manual_unit.append(label_unit_value(label, mapping, scale))
        except InputError as error:
            raise InputError(f"item {j.id!r}: {error.message}", field="manual_label") from error
    pairs = Pairs(
        manual=np.asarray(manual, dtype=int),
        judge=np.asarray([v[0] for _, v in kept], dtype=int),
        score=np.asarray([v[1] for _, v in kept], dtype=float),
        manual_unit=np.asarray(manual_unit, dtype=float),
        judge_unit=np.asarray([v[2] for _, v in kept], dtype=float),
        n_classes=len(mapping.classes),
    )
    return pairs, excluded


def _bootstrap(pairs: Pairs, resamples: int, seed: int) -> dict[str, list[float]]:
    """Each statistic over `resamples` resamples of the items (with replacement); undefined resamples are skipped."""
    values: dict[str, list[float]] = {name: [] for name in STATISTICS}
    if len(pairs) < 2 or resamples <= 0:
        return values
    rng = np.random.default_rng(seed)
    for index in rng.integers(0, len(pairs), size=(resamples, len(pairs))):
        sample = pairs.take(index)
        for name, statistic in STATISTICS.items():
            try:
                values[name].append(evaluate_statistic(statistic, sample))
            except Undefined:
                continue
    return values


def percentile_interval(values: list[float], resamples: int) -> Interval | None:
    if not values or len(values) < _MIN_DEFINED_SHARE * resamples:
        return None
    low, high = np.percentile(values, [2.5, 97.5])
    return Interval(low=float(low), high=float(high))


def compute_agreement(
    judgements: Sequence[Judgement],
    mapping: LabelMapping,
    *,
    resamples: int = 1000,
    seed: int = 0,
    signal: Signal | None = None,
) -> AgreementReport:
    """Agreement of the judge with manual labels over items that have a label and an `ok` judgement.

    Class statistics (accuracy, kappa, alpha, confusion matrix) compare manual and judge classes; rank correlations
    compare the manual class with the judge's 0–3 score, which keeps the judge's finer grain; MAE compares both on
    0–1. The 95% intervals are percentile bootstrap intervals over items, reproducible through `seed`.
    Raises `InputError(field="manual_label")` for a label the mapping does not know.
    """
    pairs, excluded = select_pairs(judgements, mapping, signal)
    points: dict[str, float | str] = {}  # the value, or why there is none
    for name, statistic in STATISTICS.items():
        try:
            points[name] = evaluate_statistic(statistic, pairs)
        except Undefined as undefined:
            points[name] = str(undefined)
    resampled = _bootstrap(pairs, resamples, seed)
    statistics: dict[str, Any] = {  # Any: splatted into AgreementReport beside its other fields
        name: Statistic(value=None, reason=point)
        if isinstance(point, str)
        else Statistic(value=point, ci95=percentile_interval(resampled[name], resamples))
        for name, point in points.items()
    }

    n_classes = len(mapping.classes)
    if len(pairs):
        matrix = confusion_matrix(pairs.manual, pairs.judge, labels=list(range(n_classes))).tolist()
    else:
        matrix = [[0] * n_classes for _ in range(n_classes)]
    return AgreementReport(
        n=len(pairs),
        n_excluded=excluded,
        classes=[c.name for c in mapping.classes],
        confusion_matrix=matrix,
        bootstrap=Bootstrap(resamples=resamples, seed=seed),
        **statistics,
    )


def text_table(rows: list[list[str]]) -> list[str]:
    """Rows of cells as lines, each column as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def format_agreement(report: AgreementReport) -> str:
    """A plain-text report for the CLI: one line per statistic (value, 95% CI or why it is missing), then the
    confusion matrix with manual classes as rows and judge classes as columns."""
    excluded = ", ".join(f"{count} {why.replace('_', ' ')}" for why, count in report.n_excluded.items())
    lines = [
        f"{report.n} items compared" + (f" (excluded: {excluded})" if excluded else ""),
        f"95% CI: percentile bootstrap, {report.bootstrap.resamples} resamples, seed {report.bootstrap.seed}",
    ]
    if report.reference != "manual_label":
        lines.append(f"compared with: {report.reference}")
    lines.append("")
    rows = [["statistic", "value", "95% CI"]]
    for name, title in TITLES.items():
        stat: Statistic = getattr(report, name)
        if stat.value is None:
            rows.append([title, "n/a", f"({stat.reason})"])
        elif stat.ci95 is None:
            rows.append([title, f"{stat.value:.3f}", "n/a"])
        else:
            rows.append([title, f"{stat.value:.3f}", f"[{stat.ci95.low:.3f}, {stat.ci95.high:.3f}]"])
    lines += text_table(rows)

    lines += ["", "confusion matrix (rows: manual, columns: judge)"]
    matrix_rows = [["manual \\ judge", *report.classes]]
    matrix_rows += [
        [name, *map(str, counts)] for name, counts in zip(report.classes, report.confusion_matrix, strict=True)
    ]
    lines += text_table(matrix_rows)
    return "\n".join(lines)


def _by_metric_plan(judgements: Sequence[Judgement], mapping: LabelMapping) -> tuple[list[str], LabelMapping, bool]:
    """The metrics found in the results, the rule the verdict uses, and whether every metric it names was graded."""
    graded: list[str] = [m for m in METRICS if any(metric_of(j, m) is not None for j in judgements)]
    rule = with_default_verdict(mapping, graded)
    needed = {m for level in rule.verdict or [] for m in level.when}
    return graded, rule, rule.verdict is not None and needed <= set(graded)


def metric_columns(judgements: Sequence[Judgement], mapping: LabelMapping) -> int:
    """How many agreement reports (bootstraps) compute_agreement_by_metric will compute for these results."""
    graded, _, with_verdict = _by_metric_plan(judgements, mapping)
    return 2 * (len(graded) + with_verdict)


def compute_agreement_by_metric(
    judgements: Sequence[Judgement], mapping: LabelMapping, *, resamples: int = 1000, seed: int = 0
) -> AgreementByMetric:
    """Side by side: each graded metric (discrete score, and expected score cut by the mapping's thresholds) and the
    verdict (the mapping's rule, or the default verdict of the metrics graded when it has none) against the same
    manual labels.

    Columns appear for the metrics found in the results; the verdict needs every metric its rule names. This is the
    function `juiz agreement --by-metric` and the API's /agreement/metrics call.
    """
    graded, rule, with_verdict = _by_metric_plan(judgements, mapping)
    columns: dict[str, AgreementReport] = {}
    for metric in graded:
        for signal, suffix in (("score", ""), ("expected_score", " (expected)")):
            columns[metric + suffix] = compute_agreement(
                judgements, mapping, resamples=resamples, seed=seed, signal=metric_signal(metric, mapping, signal)
            )
    if with_verdict:
        for signal, suffix in (("score", ""), ("expected_score", " (expected)")):
            columns["verdict" + suffix] = compute_agreement(
                judgements,
                mapping,
                resamples=resamples,
                seed=seed,
                signal=verdict_signal(rule.model_copy(update={"signal": signal})),
            )
    return AgreementByMetric(columns=columns, verdict=rule.verdict if with_verdict else None)


def format_agreement_by_metric(report: AgreementByMetric) -> str:
    """One column per signal, one row per statistic (point values; `--json` has the intervals)."""
    if not report.columns:
        return "no graded metric in these results"
    names = list(report.columns)
    rows = [["statistic", *names], ["n compared", *(str(report.columns[n].n) for n in names)]]
    for field, title in TITLES.items():
        cells = []
        for name in names:
            stat: Statistic = getattr(report.columns[name], field)
            cells.append("n/a" if stat.value is None else f"{stat.value:.3f}")
        rows.append([title, *cells])
    lines = text_table(rows)
    if report.verdict is not None:
        rule = "; ".join(
            f"{level.label} if " + " and ".join(f"{m} >= {v:g}" for m, v in level.when.items())
            for level in report.verdict
        )
        lines += ["", f"verdict: {rule}; otherwise the worst class (minimums on 0-3; (expected): 3 x expected score)"]
    lines += ["(expected): the expected score cut by the label mapping's thresholds; ranked by the expected score"]
    return "\n".join(lines)
