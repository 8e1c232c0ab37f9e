"""How much better one run agrees with the labels than another: each agreement statistic's difference, run b − run
a, with a paired bootstrap interval.

Paired: the items are resampled once per round and both runs' statistic is computed on that same resample, so what
the items have in common (easy items, hard items) cancels out. Two separate intervals that overlap say little; this
one is about the difference itself, and is narrower when the runs succeed and fail on the same items.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from juiz.agreement.statistics import (
    STATISTICS,
    Pairs,
    Signal,
    Undefined,
    evaluate_statistic,
    percentile_interval,
    select_pairs,
)
from schemas.compare import PairedDifference
from schemas.judgement import Judgement
from schemas.labels import LabelMapping


def paired_items(
    left: Sequence[Judgement], right: Sequence[Judgement], read: Signal
) -> tuple[list[Judgement], list[Judgement]]:
    """The item pairs (left[i] and right[i] are one item) that both runs can compare with a label: each has a manual
    label and a judge class."""
    kept = [
        (a, b)
        for a, b in zip(left, right, strict=True)
        if a.manual_label is not None and b.manual_label is not None and read(a) is not None and read(b) is not None
    ]
    return [a for a, _ in kept], [b for _, b in kept]


def _difference(name: str, a: Pairs, b: Pairs) -> float:
    statistic = STATISTICS[name]
    return evaluate_statistic(statistic, b) - evaluate_statistic(statistic, a)


def paired_differences(
    left: Sequence[Judgement],
    right: Sequence[Judgement],
    mapping: LabelMapping,
    read: Signal,
    *,
    resamples: int,
    seed: int = 0,
) -> dict[str, PairedDifference]:
    """Every statistic of `compute_agreement`, b − a, over aligned item pairs as `paired_items` returns them.

    A statistic undefined for either run (one class only, too few items) is null with the reason. The 95% interval is
    the percentile interval of the resampled differences; rounds where either side is undefined are skipped, and with
    fewer than half the rounds defined there is no interval."""
    a, _ = select_pairs(left, mapping, read)
    b, _ = select_pairs(right, mapping, read)
    out: dict[str, PairedDifference] = {}
    resampled: dict[str, list[float]] = {name: [] for name in STATISTICS}
    if len(a) >= 2 and resamples > 0:
        rng = np.random.default_rng(seed)
        for index in rng.integers(0, len(a), size=(resamples, len(a))):
            sample_a, sample_b = a.take(index), b.take(index)
            for name in STATISTICS:
                try:
                    resampled[name].append(_difference(name, sample_a, sample_b))
                except Undefined:
                    continue
    for name, statistic in STATISTICS.items():
        try:
            value_a = evaluate_statistic(statistic, a)
            value_b = evaluate_statistic(statistic, b)
        except Undefined as undefined:
            out[name] = PairedDifference(reason=str(undefined))
            continue
        out[name] = PairedDifference(
            a=value_a,
            b=value_b,
            difference=value_b - value_a,
            ci95=percentile_interval(resampled[name], resamples),
        )
    return out
