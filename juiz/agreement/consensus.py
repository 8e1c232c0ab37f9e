"""The reference label of each item, made by a `ConsensusRule` from its annotators' labels: what the judge's agreement,
the comparisons and the prediction-powered shares compare with.

majority: the class most annotators gave (labels are read through the label mapping, so "C" and "correct" are one
vote); one label alone is kept as given (a number keeps its precision); a tie leaves the item without a reference.
annotator: that annotator's latest label, as given.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from juiz.agreement.annotations import item_annotations, latest_by_annotator
from juiz.agreement.labels import NumericScale, class_of_label, resolve_numeric_scale
from juiz.runtime.errors import InputError
from schemas.annotation import Annotation, ConsensusRule
from schemas.judgement import Judgement
from schemas.labels import LabelMapping
from schemas.triple import Label


@dataclass(frozen=True)
class Consensus:
    """The results with `manual_label` set to their reference label (None where the rule gives none)."""

    judgements: list[Judgement]
    rule: ConsensusRule
    labelled: int  # items the rule gave a label
    ties: int  # items a majority left without one


def class_of_annotation(annotation: Annotation, mapping: LabelMapping, scale: NumericScale, item: str) -> int:
    """The label's class index; InputError naming the item and the annotator for a label the mapping does not know."""
    try:
        return class_of_label(annotation.label, mapping, scale)
    except InputError as error:
        raise InputError(
            f"item {item!r}, {annotation.annotator}'s label: {error.message}", field="annotations.label"
        ) from error


def reference_label(
    annotations: Sequence[Annotation], rule: ConsensusRule, mapping: LabelMapping, scale: NumericScale, item: str
) -> tuple[Label | None, bool]:
    """(the item's reference label or None, whether a tie left it out)."""
    latest = latest_by_annotator(annotations, rule.metric)
    if rule.kind == "annotator":
        chosen = latest.get(rule.annotator or "")
        return (None if chosen is None else chosen.label), False
    if not latest:
        return None, False
    if len(latest) == 1:
        only = next(iter(latest.values()))
        class_of_annotation(only, mapping, scale, item)
        return only.label, False
    votes = Counter(class_of_annotation(a, mapping, scale, item) for a in latest.values())
    (winner, most), *rest = votes.most_common()
    if rest and rest[0][1] == most:
        return None, True
    return mapping.classes[winner].name, False


def apply_consensus(judgements: Sequence[Judgement], mapping: LabelMapping, rule: ConsensusRule) -> Consensus:
    """Every item's reference label by `rule`, written as its `manual_label` (its annotations kept beside it).
    Raises InputError naming the item and annotator for a label the mapping does not know."""
    every = [a for j in judgements for a in item_annotations(j)]
    scale = resolve_numeric_scale([a.label for a in every], mapping)
    out: list[Judgement] = []
    labelled = ties = 0
    for judgement in judgements:
        label, tied = reference_label(item_annotations(judgement), rule, mapping, scale, judgement.id)
        labelled += label is not None
        ties += tied
        out.append(judgement.model_copy(update={"manual_label": label}))
    return Consensus(judgements=out, rule=rule, labelled=labelled, ties=ties)
