"""How far the annotators agree with one another: Krippendorff's alpha over everyone (an item labelled by some
annotators only still counts), Cohen's kappa for each two on the items both labelled.

People who disagree with each other bound how well a judge can agree with any one of them: a judge's kappa near the
annotators' own is as good as the labels allow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Literal

import krippendorff
import numpy as np
from sklearn.metrics import cohen_kappa_score

from juiz.agreement.annotations import item_annotations, latest_by_annotator
from juiz.agreement.consensus import Consensus, class_of_annotation
from juiz.agreement.labels import resolve_numeric_scale
from schemas.agreement import AnnotatorPair, InterAnnotatorReport, Statistic
from schemas.judgement import Judgement
from schemas.labels import LabelMapping


def _statistic(compute: Callable[[], float]) -> Statistic:
    """The figure, or null with the reason when the data can't define it."""
    try:
        value = compute()
    except ValueError as error:  # krippendorff's "more than one value in the domain" and the like
        return Statistic(reason=str(error))
    if not math.isfinite(value):
        return Statistic(reason="undefined for these labels")
    return Statistic(value=value)


def _alpha(data: np.ndarray, n_classes: int, level: Literal["ordinal", "nominal"]) -> Statistic:
    if data.shape[0] < 2:
        return Statistic(reason="fewer than two annotators")
    pairable = data[:, np.sum(~np.isnan(data), axis=0) >= 2]  # alpha reads only items labelled twice or more
    if pairable.shape[1] == 0:
        return Statistic(reason="no item labelled by two annotators")
    if len(np.unique(pairable[~np.isnan(pairable)])) < 2:
        return Statistic(reason="only one class present on the items labelled twice or more")
    return _statistic(
        lambda: float(
            krippendorff.alpha(reliability_data=data, level_of_measurement=level, value_domain=list(range(n_classes)))
        )
    )


def _kappa(first: list[int], second: list[int], n_classes: int) -> Statistic:
    if len(first) < 2:
        return Statistic(reason=f"{len(first)} items labelled by both")
    if len(set(first) | set(second)) < 2:
        return Statistic(reason="only one class present")
    return _statistic(lambda: float(cohen_kappa_score(first, second, labels=list(range(n_classes)))))


def inter_annotator(
    judgements: Sequence[Judgement], mapping: LabelMapping, consensus: Consensus
) -> InterAnnotatorReport:
    """The annotators' agreement over the items' labels about the consensus rule's metric (their latest each), with
    the rule that made the reference labels and how many it gave."""
    metric = consensus.rule.metric
    per_item = [(j.id, latest_by_annotator(item_annotations(j), metric)) for j in judgements if item_annotations(j)]
    per_item = [(item, latest) for item, latest in per_item if latest]
    scale = resolve_numeric_scale([a.label for _, latest in per_item for a in latest.values()], mapping)
    annotators = sorted({name for _, latest in per_item for name in latest})
    row = {name: n for n, name in enumerate(annotators)}
    data = np.full((len(annotators), len(per_item)), np.nan)
    for column, (item, latest) in enumerate(per_item):
        for name, annotation in latest.items():
            data[row[name], column] = class_of_annotation(annotation, mapping, scale, item)
    n_classes = len(mapping.classes)
    pairs = []
    for a, b in combinations(annotators, 2):
        both = ~np.isnan(data[row[a]]) & ~np.isnan(data[row[b]])
        first, second = data[row[a]][both].astype(int).tolist(), data[row[b]][both].astype(int).tolist()
        pairs.append(AnnotatorPair(a=a, b=b, n=len(first), cohen_kappa=_kappa(first, second, n_classes)))
    return InterAnnotatorReport(
        annotators=annotators,
        labels={name: int((~np.isnan(data[row[name]])).sum()) for name in annotators},
        items=len(per_item),
        items_shared=int((np.sum(~np.isnan(data), axis=0) >= 2).sum()),
        krippendorff_alpha_ordinal=_alpha(data, n_classes, "ordinal"),
        krippendorff_alpha_nominal=_alpha(data, n_classes, "nominal"),
        pairs=pairs,
        consensus=consensus.rule.describe(),
        consensus_items=consensus.labelled,
        ties=consensus.ties,
    )


def format_inter_annotator(report: InterAnnotatorReport) -> str:
    """The annotators' agreement as a few lines for the CLI."""

    def shown(stat: Statistic) -> str:
        return f"n/a ({stat.reason})" if stat.value is None else f"{stat.value:.3f}"

    counts = ", ".join(f"{name} {count}" for name, count in report.labels.items())
    lines = [
        f"annotators: {len(report.annotators)} ({counts}); {report.items} items labelled, "
        f"{report.items_shared} by two or more",
        f"  Krippendorff's alpha: ordinal {shown(report.krippendorff_alpha_ordinal)}, "
        f"nominal {shown(report.krippendorff_alpha_nominal)}",
    ]
    lines += [f"  Cohen's kappa {p.a} / {p.b} on {p.n} items: {shown(p.cohen_kappa)}" for p in report.pairs]
    tied = f", {report.ties} tied (left out)" if report.ties else ""
    lines.append(f"reference label: {report.consensus}: {report.consensus_items} items{tied}")
    return "\n".join(lines)
