"""Calibration's features: what a calibration reads off a judgement, and the labelled results it is fitted on."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import prompts
from juiz.agreement.labels import class_of_label, metric_of, resolve_numeric_scale
from juiz.runtime.errors import InputError
from schemas.judgement import METRICS, CheckStatus, Judgement, MetricResult, MetricStatus
from schemas.labels import LabelMapping

FEATURE_SIGNAL = "expected_score"
CHECK_FEATURE = "check"


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
    template = prompts.template_for(result.provenance.prompt if result.provenance else None)
    return template is not None and any(c.name == name and c.ask == "per_point" for c in template.checks)


def feature_vector(judgement: Judgement, names: Sequence[str]) -> tuple[list[float] | None, str | None]:
    """The result's features in `names` order, or (None, why) when one is missing: never a made-up value.

    Each feature is the metric's expected score (0–1); where the digit's probabilities were not available (expected
    score null) its discrete score / 3 stands in, the same scale with a coarser grain."""
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
class LabelledFeatures:
    """Labelled items that have every feature: one row of `features` and one class index in `labels` per item of
    `judgements`; `n_missing` labelled items were left out for a missing feature."""

    judgements: list[Judgement]
    features: np.ndarray
    labels: np.ndarray
    names: list[str]
    n_missing: int


def labelled_features(judgements: Sequence[Judgement], mapping: LabelMapping) -> LabelledFeatures:
    """Items with a manual label and every feature; their class indices under the mapping."""
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
    return LabelledFeatures(
        judgements=kept,
        features=np.asarray(rows, dtype=float).reshape(len(rows), len(names)),
        labels=np.asarray(labels, dtype=int),
        names=names,
        n_missing=len(labelled) - len(kept),
    )
