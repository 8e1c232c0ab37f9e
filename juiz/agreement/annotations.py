"""Each item's labels by annotator: the annotations a result carries, those a labels file adds, and an older result's
single manual label, read as one annotation.

An annotator has one label per item and metric: their latest (by `at`; without times, the last given). Labels of
different annotators never replace one another.
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.annotation import Annotation, AnnotationRecord
from schemas.judgement import Judgement

UNNAMED = "manual"  # the author of a manual label that names none


def item_annotations(judgement: Judgement) -> list[Annotation]:
    """The item's annotations; a result without any but with a manual label holds that one, by `manual_label_by`
    (as the store records it) or by UNNAMED."""
    if judgement.annotations:
        return list(judgement.annotations)
    if judgement.manual_label is None:
        return []
    extra = judgement.model_extra or {}
    author = extra.get("manual_label_by")
    return [Annotation(annotator=str(author) if author else UNNAMED, label=judgement.manual_label)]


def latest_by_annotator(annotations: Sequence[Annotation], metric: str | None) -> dict[str, Annotation]:
    """Per annotator, their latest label about `metric` (None: the answer as a whole)."""
    out: dict[str, Annotation] = {}
    for annotation in annotations:
        if annotation.metric != metric:
            continue
        held = out.get(annotation.annotator)
        if held is None or held.at is None or annotation.at is None or annotation.at >= held.at:
            out[annotation.annotator] = annotation
    return out


def attach(judgements: Sequence[Judgement], records: Sequence[AnnotationRecord]) -> tuple[list[Judgement], int]:
    """The results with a labels file's lines added to the items they name (by the triple's content key where the line
    gives one, else by id), and how many lines named no item here (a labelled set may cover other triples too)."""
    by_key: dict[str, list[int]] = {}
    by_id: dict[str, list[int]] = {}
    for position, judgement in enumerate(judgements):
        by_key.setdefault(judgement.content_key(), []).append(position)
        by_id.setdefault(judgement.id, []).append(position)
    added: dict[int, list[Annotation]] = {}
    unmatched = 0
    for record in records:
        positions = by_key.get(record.triple, []) if record.triple is not None else by_id.get(record.id or "", [])
        if not positions:
            unmatched += 1
        for position in positions:
            added.setdefault(position, []).append(record.annotation())
    out = [
        j.model_copy(update={"annotations": [*item_annotations(j), *added[n]]}) if n in added else j
        for n, j in enumerate(judgements)
    ]
    return out, unmatched
