"""Prediction-powered inference: the share of C / P / I answers in a batch, from every judge grade corrected by the
labelled items (what ARES does).

The judge grades every item but errs in its own ways; people label only some items. Prediction-powered inference
(Angelopoulos, Bates, Fannjiang, Jordan & Zrnic, Science 2023) takes the judge's share on the unlabelled items and
adds the rectifier, the mean of (label − judge) on the labelled items, which removes the judge's bias whatever it is.
Its interval adds the two parts' variances; the quantile is Student's t on n − 1 degrees of
freedom (n labelled items), not the normal's 1.96, because the rectifier's variance comes from few labels. PPI++
(Angelopoulos, Duchi & Zrnic 2023) weighs the judge by λ in [0, 1] fitted to the data: λ = 1 is plain PPI, λ = 0 the
labelled items alone, so a judge that tells nothing costs nothing and a decent one narrows the interval.

Valid (95% coverage, asymptotically) when the labelled items are a uniformly random sample of the items: labels
chosen by the judge's uncertainty, or only on hard items, bias it. An item the judge failed on is kept, with no
prediction (0 for every class): the rectifier corrects that too.

The estimator is a few lines of numpy; the `ppi-python` package would bring pandas and statsmodels into the service
for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from juiz.agreement.labels import class_of_label, resolve_numeric_scale
from juiz.agreement.statistics import Signal, top_level_signal
from schemas.agreement import Interval, ShareEstimate, Shares
from schemas.judgement import Judgement
from schemas.labels import LabelMapping

MIN_LABELLED = 2  # a variance needs two
METHOD = (
    "prediction-powered inference with PPI++ power tuning (Angelopoulos et al. 2023): the judge's classes on the "
    "unlabelled items, corrected by (label − judge) on the labelled ones; 95% interval with Student's t on n − 1 "
    "degrees of freedom (n labelled)"
)


@dataclass(frozen=True)
class MeanEstimate:
    estimate: float
    low: float
    high: float
    tuning: float


def _quantile(n_labelled: int) -> float:
    return float(student_t.ppf(0.975, n_labelled - 1))


def classical_mean(truth: np.ndarray) -> MeanEstimate:
    """The labelled items alone: their mean and its 95% interval (the same t quantile)."""
    mean = float(truth.mean())
    half = _quantile(len(truth)) * float(truth.std(ddof=1)) / np.sqrt(len(truth))
    return MeanEstimate(mean, mean - half, mean + half, 0.0)


def ppi_mean(truth: np.ndarray, predicted: np.ndarray, unlabelled: np.ndarray) -> MeanEstimate:
    """The mean of `truth` over the whole population, from labelled items (`truth`, and the judge's `predicted` for
    the same items) and unlabelled ones (the judge's predictions only), power-tuned. Needs two labelled items."""
    n, big_n = len(truth), len(unlabelled)
    if big_n == 0:
        return classical_mean(truth)
    every = np.concatenate([predicted, unlabelled])
    spread = float(every.var(ddof=1))
    tuning = 0.0
    if spread > 0:
        covariance = float(np.cov(truth, predicted, ddof=1)[0, 1])
        tuning = float(np.clip(covariance / ((1 + n / big_n) * spread), 0.0, 1.0))
    rectifier = truth - tuning * predicted
    estimate = tuning * float(unlabelled.mean()) + float(rectifier.mean())
    variance = tuning**2 * float(unlabelled.var(ddof=1) if big_n > 1 else 0.0) / big_n
    variance += float(rectifier.var(ddof=1)) / n
    half = _quantile(n) * float(np.sqrt(variance))
    return MeanEstimate(estimate, estimate - half, estimate + half, tuning)


def _interval(estimate: MeanEstimate, low: float, high: float) -> Interval:
    """The interval cut to what the quantity can be (a share is in [0, 1]): no true value lies outside."""
    return Interval(low=float(np.clip(estimate.low, low, high)), high=float(np.clip(estimate.high, low, high)))


def _one_hot(classes: Sequence[int | None], n_classes: int) -> np.ndarray:
    """Items × classes; an item without a class (no judge grade, no label) is a row of zeros."""
    out = np.zeros((len(classes), n_classes))
    for row, index in enumerate(classes):
        if index is not None:
            out[row, index] = 1.0
    return out


def _label_classes(judgements: Sequence[Judgement], mapping: LabelMapping) -> list[int | None]:
    scale = resolve_numeric_scale([j.manual_label for j in judgements], mapping)
    return [None if j.manual_label is None else class_of_label(j.manual_label, mapping, scale) for j in judgements]


def _judge_classes(judgements: Sequence[Judgement], read: Signal) -> list[int | None]:
    return [None if (value := read(j)) is None else value[0] for j in judgements]


def _estimates(
    truth: np.ndarray,
    predicted: np.ndarray,
    labelled: np.ndarray,
    names: Sequence[str],
    bounds: tuple[float, float],
) -> list[ShareEstimate]:
    """Per class (column): the prediction-powered estimate, the labelled items alone, the judge alone."""
    out = []
    for column, name in enumerate(names):
        y, f = truth[labelled, column], predicted[labelled, column]
        unlabelled = predicted[~labelled, column]
        powered, alone = ppi_mean(y, f, unlabelled), classical_mean(y)
        out.append(
            ShareEstimate(
                label=name,
                estimate=float(np.clip(powered.estimate, *bounds)),
                ci95=_interval(powered, *bounds),
                classical=alone.estimate,
                classical_ci95=_interval(alone, *bounds),
                judge_only=float(predicted[:, column].mean()),
                tuning=powered.tuning,
            )
        )
    return out


def estimate_shares(
    judgements: Sequence[Judgement],
    mapping: LabelMapping,
    *,
    signal: Signal | None = None,
    reference: str = "manual_label",
) -> Shares:
    """Each class's share of the answers over every item, prediction-powered. An item's `manual_label` is its
    reference label (set it from a consensus first); `signal` reads the judge's class as `compute_agreement` does.
    Raises `InputError(field="manual_label")` for a label the mapping does not know."""
    read = signal or top_level_signal(mapping)
    names = [c.name for c in mapping.classes]
    labels, judged = _label_classes(judgements, mapping), _judge_classes(judgements, read)
    labelled = np.array([label is not None for label in labels], dtype=bool)
    shares = Shares(
        of="share",
        n_items=len(judgements),
        n_labelled=int(labelled.sum()),
        n_ungraded=sum(1 for c in judged if c is None),
        reference=reference,
        method=METHOD,
    )
    if shares.n_labelled < MIN_LABELLED:
        shares.unavailable = f"{shares.n_labelled} labelled items: needs {MIN_LABELLED} or more"
        return shares
    truth, predicted = _one_hot(labels, len(names)), _one_hot(judged, len(names))
    shares.shares = _estimates(truth, predicted, labelled, names, (0.0, 1.0))
    return shares


def estimate_share_difference(
    left: Sequence[Judgement],
    right: Sequence[Judgement],
    mapping: LabelMapping,
    *,
    signal: Signal | None = None,
    reference: str = "manual_label",
) -> Shares:
    """Each class's share in run b − in run a, over the same questions (`left[i]` and `right[i]` are one question;
    each run's item carries its own answer's label). Paired: per question the judge's difference and, where both
    runs' answers are labelled, the labels' difference, so what the questions share cancels out."""
    read = signal or top_level_signal(mapping)
    names = [c.name for c in mapping.classes]
    labels_a, labels_b = _label_classes(left, mapping), _label_classes(right, mapping)
    judged_a, judged_b = _judge_classes(left, read), _judge_classes(right, read)
    labelled = np.array([a is not None and b is not None for a, b in zip(labels_a, labels_b, strict=True)], dtype=bool)
    shares = Shares(
        of="difference",
        n_items=len(left),
        n_labelled=int(labelled.sum()),
        n_ungraded=sum(1 for a, b in zip(judged_a, judged_b, strict=True) if a is None or b is None),
        reference=reference,
        method=METHOD + "; paired by question, labelled where both runs' answers are",
    )
    if shares.n_labelled < MIN_LABELLED:
        shares.unavailable = f"{shares.n_labelled} questions labelled in both runs: needs {MIN_LABELLED} or more"
        return shares
    n_classes = len(names)
    truth = _one_hot(labels_b, n_classes) - _one_hot(labels_a, n_classes)
    predicted = _one_hot(judged_b, n_classes) - _one_hot(judged_a, n_classes)
    shares.shares = _estimates(truth, predicted, labelled, names, (-1.0, 1.0))
    return shares
